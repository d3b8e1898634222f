"""Teachers from config: an in-process model folder or a vLLM server, checked against the student's vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from tempering.config import Schema
from tempering.errors import UserError
from tempering.teachers.base import Teacher
from tempering.teachers.hf import HFTeacher, resolve_model_dir
from tempering.teachers.server import ServerTeacher
from tempering.teachers.vocab import check_vocab


class TeacherSection(Schema):
    """Where one teacher (or reference) model lives."""

    path: str | None = Field(
        None, description="Model folder, or a finished run's folder (its final/ or model/), loaded in this process."
    )
    server: str | None = Field(
        None, description="Base URL of a vLLM OpenAI-compatible server (instead of path), e.g. http://host:8000."
    )
    served_model: str | None = Field(None, description="The model name the server serves (server teachers).")
    tokenizer: str | None = Field(
        None,
        description="Local folder with the served model's tokenizer (server teachers; checked against the student's).",
    )
    top_n: int = Field(20, ge=1, description="prompt_logprobs asked of a server teacher (its top-N per position).")
    timeout_s: float = Field(
        300.0, gt=0, description="Seconds a server teacher may take to answer one request (then the run stops)."
    )
    prompt: str = Field(
        "{prompt}",
        description="The teacher's prompt: a template over the example ({prompt}, {answer}, {meta[key]}) or pkg.module:function.",
    )
    device: str | None = Field(
        None, description="Device of an in-process teacher: cpu, cuda, cuda:N, auto (default: the student's)."
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="Parameter dtype of an in-process teacher (default: the student's)."
    )

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.server is None):
            raise ValueError("give exactly one of path (in-process) or server (vLLM endpoint)")
        if self.server is not None and (self.served_model is None or self.tokenizer is None):
            raise ValueError("a server teacher needs served_model and tokenizer (a local folder with its tokenizer)")
        return self


def load_teacher(
    spec: TeacherSection, name: str, device: str = "cpu", dtype: str = "float32", pack: bool = False
) -> Teacher:
    """A teacher from its section; `device` and `dtype` apply to an in-process teacher that names none, which
    scores packed rows with `pack`."""
    if spec.path is not None:
        return HFTeacher.from_path(
            spec.path, name=name, device=spec.device or device, dtype=spec.dtype or dtype, pack=pack
        )
    from transformers import AutoTokenizer

    # TeacherSection's validator: without a path, server, served_model and tokenizer are all given
    assert spec.server is not None and spec.served_model is not None and spec.tokenizer is not None
    try:
        tok = AutoTokenizer.from_pretrained(str(_tokenizer_dir(spec.tokenizer)), local_files_only=True)
    except (OSError, ValueError) as e:
        raise UserError(f"{name}: cannot load the tokenizer in {spec.tokenizer!r} ({e})") from None
    return ServerTeacher(spec.server, spec.served_model, tok, name=name, top_n=spec.top_n, timeout_s=spec.timeout_s)


def _tokenizer_dir(path: str) -> Path:
    """A plain tokenizer folder (no config.json), or a model or run folder."""
    p = Path(path).expanduser()
    if (p / "tokenizer.json").is_file() or (p / "tokenizer_config.json").is_file():
        return p
    return resolve_model_dir(p)


def load_teachers(
    specs: dict[str, TeacherSection],
    student_tokenizer,
    device: str = "cpu",
    dtype: str = "float32",
    pack: bool = False,
) -> dict[str, Teacher]:
    """Load every teacher (name -> spec) and refuse to start unless all share the student's vocabulary
    (`student_tokenizer`; None: any tokenizer, for methods that align other vocabularies by text spans)."""
    teachers = {name: load_teacher(spec, name, device, dtype, pack) for name, spec in specs.items()}
    if student_tokenizer is not None:
        check_vocab(student_tokenizer, {f"teacher {name!r}": t.tokenizer for name, t in teachers.items()})
    return teachers
