"""Bad input is refused before anything is written, with a message that names the field."""

import os

import pytest

from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Sandbox


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "..", "", "a/\0b"])
def test_escaping_file_paths_are_refused(path):
    with pytest.raises(UserError, match="Job.files"):
        Job(cmd=["true"], files={path: "x"}).validate()


def test_escaping_output_and_readonly_paths_are_refused():
    with pytest.raises(UserError, match="Job.outputs"):
        Job(cmd=["true"], outputs=["../result.json"]).validate()
    with pytest.raises(UserError, match="Job.readonly_files"):
        Job(cmd=["true"], readonly_files={"/abs": "x"}).validate()


def test_file_inside_a_file_and_duplicates_are_refused():
    with pytest.raises(UserError, match="inside 'a'"):
        Job(cmd=["true"], files={"a": "x", "a/b": "y"}).validate()
    with pytest.raises(UserError, match="given twice"):
        Job(cmd=["true"], files={"a": "x"}, readonly_files={"./a": "y"}).validate()


@pytest.mark.parametrize("field", ["wall_s", "cpu_s", "memory_mb", "nproc", "fsize_mb", "nofile", "output_bytes"])
@pytest.mark.parametrize("value", [0, -1, None, True])
def test_non_positive_limits_are_refused(field, value):
    with pytest.raises(UserError, match=f"Limits.{field}"):
        Limits(**{field: value})


def test_bad_cmd_env_and_binds_are_refused():
    with pytest.raises(UserError, match="Job.cmd"):
        Job(cmd=[]).validate()
    with pytest.raises(UserError, match="Job.env"):
        Job(cmd=["true"], env={"A=B": "x"}).validate()
    with pytest.raises(UserError, match="ro_binds"):
        Job(cmd=["true"], ro_binds=["relative/path"]).validate()
    with pytest.raises(UserError, match="ro_binds"):
        Job(cmd=["true"], ro_binds=["/no/such/path/anywhere"]).validate()


def test_missing_interpreter_is_a_clear_error_and_leaves_nothing(tmp_path, backend):
    sb = Sandbox(backend=backend, root=str(tmp_path))
    with pytest.raises(UserError, match="'python9' is not on the job's PATH"):
        sb.run_sync(Job(cmd=["python9", "main.py"], files={"main.py": "print(1)"}))
    with pytest.raises(UserError, match="does not exist"):
        sb.run_sync(Job(cmd=["/opt/no/gcc", "k.c"]))
    assert os.listdir(tmp_path) == []  # no job folder was made


def test_unknown_backend_and_bad_pool_sizes():
    with pytest.raises(UserError, match="unknown sandbox backend"):
        Sandbox(backend="docker")
    with pytest.raises(UserError, match="concurrency"):
        Sandbox(backend="subprocess", concurrency=0)
    with pytest.raises(UserError, match="queue_size"):
        Sandbox(backend="subprocess", queue_size=-1)
