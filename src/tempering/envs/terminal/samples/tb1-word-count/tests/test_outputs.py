"""The word count of the poem is 9."""

import sys
from pathlib import Path


def test_count():
    assert Path("/app/count.txt").read_text().strip() == "9"


if __name__ == "__main__":
    try:
        test_count()
    except (AssertionError, OSError) as e:
        sys.exit(f"failed: {e!r}")
