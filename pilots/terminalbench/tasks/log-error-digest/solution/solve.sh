#!/bin/bash
awk '$2 == "ERROR" { split($1, t, "T"); n[t[1]]++ } END { for (d in n) print d "," n[d] }' /app/service.log | sort > /app/error_digest.csv
