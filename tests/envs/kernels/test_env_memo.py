import asyncio

from tempering.envs.kernels.env import KernelFamily


class CountingVerifier:
    def __init__(self):
        self.calls = 0

    async def verify(self, problem, text):
        from tempering.envs.kernels.verifier import KernelResult

        self.calls += 1
        await asyncio.sleep(0.01)
        return KernelResult.__new__(KernelResult)


class P:
    name = "p1"


def test_memoize_verifies_each_distinct_submission_once_even_in_flight():
    fam = KernelFamily(memoize=True)
    fam._verifier = CountingVerifier()

    async def go():
        a = await asyncio.gather(*(fam.verify_submission(P, "same") for _ in range(4)))
        b = await fam.verify_submission(P, "other")
        return a, b

    a, b = asyncio.run(go())
    assert fam.verifier.calls == 2 and all(x is a[0] for x in a) and b is not a[0]
    asyncio.run(fam.verify_submission(P, "same"))  # a later event loop reuses the finished result
    assert fam.verifier.calls == 2
    plain = KernelFamily()
    plain._verifier = CountingVerifier()
    asyncio.run(plain.verify_submission(P, "same"))
    asyncio.run(plain.verify_submission(P, "same"))
    assert plain.verifier.calls == 2
