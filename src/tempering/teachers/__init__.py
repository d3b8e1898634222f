"""Teachers: per-token log-probs of the student's own samples, from an in-process model or a server.

On-policy distillation methods (OPD, Direct-OPD, TU-OPD) differ only in how they turn these scores
into per-token credit; the scoring layer is shared.
"""

from tempering.teachers.base import Teacher, TeacherScores
from tempering.teachers.hf import HFTeacher, resolve_model_dir
from tempering.teachers.load import TeacherSection, load_teacher, load_teachers
from tempering.teachers.prompts import PromptBuilder, load_builder, score_episodes, template_builder
from tempering.teachers.server import ServerTeacher
from tempering.teachers.vocab import check_vocab

__all__ = [
    "HFTeacher",
    "PromptBuilder",
    "ServerTeacher",
    "Teacher",
    "TeacherScores",
    "TeacherSection",
    "check_vocab",
    "load_builder",
    "load_teacher",
    "load_teachers",
    "resolve_model_dir",
    "score_episodes",
    "template_builder",
]
