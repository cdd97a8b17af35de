#!/bin/bash
python3 - <<'PY'
import datetime, re
seen = []
for m in re.finditer(r"(?<![\d-])(\d{4})-(\d{2})-(\d{2})(?![\d-])", open("/app/notes.txt").read()):
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        continue
    if m[0] not in seen:
        seen.append(m[0])
open("/app/dates.txt", "w").write("".join(d + "\n" for d in seen))
PY
