"""An ironmem process adding entries through the public API (for tests/test_data_safety_locks.py).

Usage: python ironmem_writer.py <memory dir> <count> <prefix> <ready file> <go file>
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's ironmem

from ironmem import MemoryManager


def main() -> None:
    folder, count, prefix = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ready, go = Path(sys.argv[4]), Path(sys.argv[5])
    with MemoryManager(home=folder, memory_char_limit=1_000_000) as manager:
        session = manager.start_session("writer")
        ready.write_text("ready")
        while not go.exists():
            time.sleep(0.001)
        for i in range(count):
            result = json.loads(session.handle_tool_call(
                "memory", {"action": "add", "target": "memory", "content": f"{prefix} {i}"}))
            if not result.get("success"):
                print(json.dumps(result), file=sys.stderr)
                sys.exit(1)


if __name__ == "__main__":
    main()
