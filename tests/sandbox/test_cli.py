"""`tempering sandbox ...` through the real CLI dispatcher."""

from tempering.cli import main


def test_backends_lists_every_backend(capsys):
    assert main(["sandbox", "backends"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("bwrap", "unshare", "subprocess"))


def test_unknown_backend_is_a_clear_error(capsys):
    assert main(["sandbox", "attacks", "docker"]) == 2
    assert "do not work here" in capsys.readouterr().err
