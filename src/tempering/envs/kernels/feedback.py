"""Feedback text for the next turn: compiler errors, the mismatch report, or the timing table."""

from __future__ import annotations

from tempering.envs.kernels.verifier import KernelResult

_HEADLINES = {
    "compile_error": "Compile error (first errors):",
    "static_check": "Rejected before compiling:",
    "bad_submission": "Not a valid submission:",
    "incorrect": "Incorrect:",
    "build_timeout": "Build timed out:",
    "forbidden_op": "Forbidden:",
    "library_compute": "Library code did the work:",
    "kernel_not_called": "Kernel not called:",
    "mutated_inputs": "Inputs modified:",
    "bad_output": "Bad output:",
    "runtime_error": "Runtime error:",
    "timeout": "Timed out:",
    "memory_exceeded": "Out of memory:",
    "crashed": "Crashed:",
    "early_exit": "Exited early:",
    "tampering": "Harness tampering:",
    "harness_error": "Harness error (not your fault):",
    "sandbox_error": "Sandbox error (not your fault):",
    "compiled_only": "Compiled (no GPU to run it):",
}


def timing_table(res: KernelResult) -> str:
    rows: list[tuple[str, float | None, float | None, str]] = [("candidate", res.t_ms, None, "")]
    rows.append(("eager", res.t_eager_ms, res.speedup_eager, ""))
    if res.t_compile_ms:
        rows.append(
            ("torch.compile", res.t_compile_ms, res.speedup_compile, " (estimated)" if res.compile_estimated else "")
        )
    lines = [f"  {'model':<14} {'median ms':>10}  speedup of candidate"]
    for name, t, sp, note in rows:
        t_s = f"{t:10.3f}" if t is not None else f"{'-':>10}"
        sp_s = f"{sp:.2f}x{note}" if sp is not None else ""
        lines.append(f"  {name:<14} {t_s}  {sp_s}")
    return "\n".join(lines)


def ptxas_summary(ptxas: dict) -> str:
    return "\n".join(
        f"  {k}: {v.get('registers', '?')} registers, {v.get('spill_stores', 0)} B spill stores, "
        f"{v.get('spill_loads', 0)} B spill loads"
        for k, v in ptxas.items()
    )


def feedback(res: KernelResult) -> str:
    """What the policy reads before its next attempt."""
    if res.correct:
        if res.interpreted:
            return "Correct (run through Triton's interpreter: no timing on this machine)."
        if res.t_ms is None:
            return "Correct."
        overhead = f", net of the harness's {res.timing_overhead_ms:.3f} ms per call" if res.timing_overhead_ms else ""
        text = f"Correct. Timing (interleaved runs{overhead}):\n" + timing_table(res)
        if res.baseline_note:
            text += f"\n{res.baseline_note}"
        text += f"\nReward (CUDA Agent): {res.cuda_agent_reward}"
        if res.flagged:
            text += "\nSpeedup above the review bound: flagged for a manual check."
        return text
    head = _HEADLINES.get(res.status, f"{res.status}:")
    text = f"{head}\n{res.message}".strip()
    if res.ptxas:
        text += "\nptxas:\n" + ptxas_summary(res.ptxas)
    return text
