#!/bin/bash
# Verifier: writes 1 to /logs/verifier/reward.txt when /app/error_digest.csv is exactly right, else 0.
mkdir -p /logs/verifier
expected=$'2026-03-01,2\n2026-03-03,3\n2026-03-05,1'
if [ -f /app/error_digest.csv ] && [ "$(sed -e 's/\r$//' -e '/^$/d' /app/error_digest.csv)" == "$expected" ]; then
  echo "PASS error_digest.csv matches"; echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL error_digest.csv missing or wrong"; echo 0 > /logs/verifier/reward.txt
fi
