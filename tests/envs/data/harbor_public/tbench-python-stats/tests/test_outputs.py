import sys

sys.path.insert(0, "/app")


def test_summary(tmp_path):
    from stats import summary

    assert summary("/app/numbers.txt") == {"count": 6, "mean": 18.0, "max": 42}
    p = tmp_path / "one.txt"
    p.write_text("5\n")
    assert summary(str(p)) == {"count": 1, "mean": 5.0, "max": 5}
