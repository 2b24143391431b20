"""A workload that keeps its own state: it counts, saves the count on SIGTERM, and resumes from it.

It writes ``<state>.ready`` once started (with the count it started from), and
the count every step to ``<state>.progress``.
"""

import os
import signal
import sys
import time
from pathlib import Path

state = Path(os.environ["HAMI_CHECKPOINT_PATH"])
restore = os.environ.get("HAMI_RESTORE_FROM")
count = int(Path(restore).read_text()) if restore else 0


def save(signum: int, frame: object) -> None:
    state.write_text(str(count))
    sys.exit(0)


signal.signal(signal.SIGTERM, save)
Path(f"{state}.ready").write_text(str(count))
while True:
    count += 1
    Path(f"{state}.progress").write_text(str(count))
    time.sleep(0.01)
