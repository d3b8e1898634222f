"""The build cache compiles each distinct build once, keeps only successes, and stays within its size."""

import asyncio
import os
import shutil

import pytest

from tempering.errors import UserError
from tempering.sandbox import BuildCache, Job, Limits, Sandbox
from tempering.sandbox.cache import BUILD_LIMITS

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
SRC = '#include <stdio.h>\nint main(void) { printf("%d\\n", VALUE); return 0; }\n'
CMD = ["gcc", "-O1", "-DVALUE=7", "main.c", "-o", "main"]


@pytest.fixture
def sb():
    return Sandbox(backend=Sandbox.available_backends()[0])


def test_second_build_is_a_hit_and_the_artifact_runs(sb, tmp_path):
    cache = BuildCache(tmp_path / "cache")

    async def main():
        first = await cache.build(sb, {"main.c": SRC}, CMD, artifact="main")
        second = await cache.build(sb, {"main.c": SRC}, CMD, artifact="main")
        ran = await sb.run(Job(cmd=[str(second.path)], ro_binds=[str(second.path)]))
        return first, second, ran

    first, second, ran = asyncio.run(main())
    assert first.result.ok and not first.cached and first.path.is_file()
    assert second.cached and second.path == first.path
    assert ran.stdout == "7\n"


def test_key_covers_sources_flags_environment_and_limits(tmp_path):
    cache = BuildCache(tmp_path)
    base = cache.key({"main.c": SRC}, CMD)
    assert base == cache.key({"main.c": SRC}, list(CMD))
    assert base != cache.key({"main.c": SRC + " "}, CMD)
    assert base != cache.key({"other.c": SRC}, CMD)
    assert base != cache.key({"main.c": SRC}, CMD[:1] + ["-O2"] + CMD[2:])
    assert base != cache.key({"main.c": SRC}, CMD, env={"CFLAGS": "-g"})
    assert base != cache.key({"main.c": SRC}, CMD, ro_binds=["/opt/toolkit"])
    assert base == cache.key({"main.c": SRC}, CMD, limits=BUILD_LIMITS)  # the default build limits
    assert base != cache.key({"main.c": SRC}, CMD, limits=Limits(wall_s=1.0))


def test_build_sees_its_ro_binds(sb, tmp_path):
    inc = tmp_path / "include"
    inc.mkdir()
    (inc / "value.h").write_text("#define VALUE 11\n")
    tmp_path.chmod(0o755)
    cache = BuildCache(tmp_path / "cache")
    cmd = ["gcc", f"-I{inc}", "main.c", "-o", "main"]
    src = '#include <stdio.h>\n#include "value.h"\nint main(void) { printf("%d\\n", VALUE); return 0; }\n'

    async def main():
        built = await cache.build(sb, {"main.c": src}, cmd, artifact="main", ro_binds=[str(inc)])
        return built, await sb.run(Job(cmd=[str(built.path)], ro_binds=[str(built.path)]))

    built, ran = asyncio.run(main())
    assert built.result.ok, built.result.stderr
    assert ran.stdout == "11\n"


def test_a_failed_build_is_never_kept(sb, tmp_path):
    """A failure may be the moment's (a loaded machine, a missing input): the next caller builds again."""
    cache = BuildCache(tmp_path)

    async def main():
        return [await cache.build(sb, {"main.c": "int main( {"}, CMD, artifact="main") for _ in range(2)]

    first, second = asyncio.run(main())
    assert first.path is None and first.result.status == "nonzero_exit" and "error" in first.result.stderr
    assert not second.cached and second.result.stderr == first.result.stderr
    assert os.listdir(tmp_path / "objects") == []


def test_a_timed_out_build_is_built_again_and_other_limits_are_another_entry(sb, tmp_path):
    cache = BuildCache(tmp_path)
    cmd = ["sh", "-c", "sleep 1.5; echo built > out"]

    async def main():
        tight = [await cache.build(sb, {"x": "1"}, cmd, "out", limits=Limits(wall_s=0.5)) for _ in range(2)]
        roomy = [await cache.build(sb, {"x": "1"}, cmd, "out", limits=Limits(wall_s=20)) for _ in range(2)]
        return tight, roomy

    tight, roomy = asyncio.run(main())
    assert [(b.result.status, b.cached) for b in tight] == [("timeout", False), ("timeout", False)]
    assert [(b.result.status, b.cached) for b in roomy] == [("ok", False), ("ok", True)]


def test_concurrent_callers_share_one_failed_build(sb, tmp_path):
    cache = BuildCache(tmp_path)

    async def main():
        return await asyncio.gather(
            *[cache.build(sb, {"main.c": "int main( {"}, CMD, artifact="main") for _ in range(3)]
        )

    builds = asyncio.run(main())
    assert sorted(b.cached for b in builds) == [False, True, True]  # one compiler run
    assert {b.result.status for b in builds} == {"nonzero_exit"}
    assert os.listdir(tmp_path / "objects") == []


def test_concurrent_builds_of_one_key_compile_once(sb, tmp_path):
    cache = BuildCache(tmp_path)

    async def main():
        return await asyncio.gather(*[cache.build(sb, {"main.c": SRC}, CMD, artifact="main") for _ in range(4)])

    builds = asyncio.run(main())
    assert sorted(b.cached for b in builds) == [False, True, True, True]
    assert len({b.path for b in builds}) == 1


def test_lru_eviction_keeps_the_cache_bounded(sb, tmp_path):
    cache = BuildCache(tmp_path, max_bytes=1, grace_s=0.0)  # room for the newest entry only

    async def main():
        a = await cache.build(sb, {"main.c": SRC}, CMD, artifact="main")
        b = await cache.build(sb, {"main.c": SRC.replace("VALUE", "VALUE + 1")}, CMD, artifact="main")
        return a, b

    a, b = asyncio.run(main())
    assert not a.path.exists() and b.path.exists()
    assert len(os.listdir(tmp_path / "objects")) == 1


def test_bad_artifact_and_size_are_refused(sb, tmp_path):
    with pytest.raises(UserError, match="max_bytes"):
        BuildCache(tmp_path, max_bytes=0)
    with pytest.raises(UserError, match="artifact"):
        asyncio.run(BuildCache(tmp_path).build(sb, {"main.c": SRC}, CMD, artifact="../main"))
