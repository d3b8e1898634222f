"""`tempering sandbox ...` through the real CLI dispatcher."""

from tempering.cli import main


def test_backends_lists_every_backend(capsys):
    assert main(["sandbox", "backends"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("bwrap", "unshare", "gvisor", "subprocess"))


def test_unknown_backend_is_a_clear_error(capsys):
    assert main(["sandbox", "attacks", "docker"]) == 2
    assert "do not work here" in capsys.readouterr().err


def test_an_unknown_path_is_a_clear_error(capsys):
    assert main(["sandbox", "attacks", "--path", "the moon"]) == 2
    assert "unknown path(s) ['the moon']" in capsys.readouterr().err
