#!/bin/bash
# Verifier: writes 1 to /logs/verifier/reward.txt when /app/dates.txt is exactly right, else 0.
mkdir -p /logs/verifier
expected=$'2025-01-14\n2025-03-02\n2024-02-29\n2025-06-30\n2025-07-01\n2025-12-31'
if [ -f /app/dates.txt ] && [ "$(sed -e 's/\r$//' -e '/^$/d' /app/dates.txt)" == "$expected" ]; then
  echo "PASS dates.txt matches"; echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL dates.txt missing or wrong"; echo 0 > /logs/verifier/reward.txt
fi
