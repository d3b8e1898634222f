"""A scripted MiniWoB policy that reads only the text the policy reads: the last observation in its
context (`Task: ...` and the screen). It checks that the observations are complete enough and the
actions work on every task it covers (`ORACLE_TASKS`); it is no benchmark of skill.

Each rule matches the task's instruction and answers with one action from the current screen; the
rules are stateless (the screen shows what is done already: field values, box states, the selected
tab or section), so an episode needs no memory of earlier turns.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

from tempering.envs.gui.action import Action, format_output

ORACLE_TASKS = (
    "click-test",
    "click-test-2",
    "click-button",
    "click-link",
    "click-checkboxes",
    "click-option",
    "click-dialog",
    "click-dialog-2",
    "click-tab",
    "click-tab-2",
    "click-widget",
    "click-collapsible",
    "enter-text",
    "enter-text-2",
    "enter-text-dynamic",
    "enter-password",
    "login-user",
    "focus-text",
    "focus-text-2",
    "choose-list",
    "click-scroll-list",
    "use-autocomplete",
    "simple-arithmetic",
)
"""MiniWoB++ tasks the oracle solves from the observation text alone."""


@dataclass
class Line:
    """One screen line: a target (`#id role text [state] {options}`) or plain text (id empty)."""

    id: str
    role: str
    text: str
    state: str = ""
    options: tuple[str, ...] = ()


LINE = re.compile(r"#(\d+) (\S+)(?: (.*))?")


def read_line(line: str) -> Line:
    m = LINE.fullmatch(line)
    if not m:
        return Line("", "text", line)
    ident, role, rest = m.group(1), m.group(2), m.group(3) or ""
    options: tuple[str, ...] = ()
    if rest.endswith("}") and "{" in rest:
        rest, _, opts = rest[:-1].rpartition("{")
        options, rest = tuple(opts.split("|")), rest.rstrip()
    state = ""
    if rest.endswith("]") and "[" in rest:
        rest, _, state = rest[:-1].rpartition("[")
        rest = rest.rstrip()
    return Line(ident, role, rest, state, options)


def last_observation(context: str) -> tuple[str, list[Line]]:
    """The instruction and the screen lines of the last observation in `context`."""
    block = context[context.rindex("Task: ") :]
    head, *lines = block.splitlines()
    if lines and lines[0] == "Page":
        lines = lines[1:]
    return head.removeprefix("Task: ").strip(), [read_line(x) for x in lines if x.strip()]


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _first(lines: list[Line], role: str | tuple[str, ...], text: str | None = None) -> Line | None:
    roles = (role,) if isinstance(role, str) else role
    for x in lines:
        if x.id and x.role in roles and (text is None or x.text.strip() == text):
            return x
    return None


def _the(lines: list[Line], role: str | tuple[str, ...], text: str | None = None) -> Line:
    """`_first` where the task's screen always has that target."""
    x = _first(lines, role, text)
    assert x is not None, f"no {role} {text or ''} on the screen"
    return x


def _submit(lines: list[Line], name: str = "Submit") -> Action:
    button = next(x for x in lines if x.id and x.role == "button" and x.text.casefold() == name.casefold())
    return Action("click", target=button.id)


def _fill(lines: list[Line], wants: list[tuple[Line, str]], submit: str = "Submit") -> Action:
    """Type each wanted value where it is not yet, then submit."""
    for box, value in wants:
        if box.state != value:
            return Action("type", target=box.id, value=value)
    return _submit(lines, submit)


def _after_label(lines: list[Line], label: str) -> Line:
    """The first target after the text line `label`."""
    i = next(i for i, x in enumerate(lines) if not x.id and x.text.strip().casefold() == label.casefold())
    return next(x for x in lines[i + 1 :] if x.id)


def _toggle(lines: list[Line], role: str, wanted: set[str]) -> Action:
    """Boxes named in `wanted` on, the others off, then submit."""
    for x in lines:
        if x.id and x.role == role and (x.text in wanted) != (x.state == "on"):
            return Action("click", target=x.id)
    return _submit(lines)


WIDGETS = {"radio": "radio", "checkbox": "checkbox", "text": "textbox", "textarea": "textarea", "button": "button"}
ORDINALS = {"1st": 0, "2nd": 1, "3rd": 2}
OPS = {"+": operator.add, "-": operator.sub, "x": operator.mul}


def solve(instruction: str, lines: list[Line]) -> Action | None:
    """The next action for this screen, or None when no rule knows the task."""
    q = _quoted(instruction)
    if instruction == "Click the button.":
        return Action("click", target=_the(lines, "button").id)
    if m := re.fullmatch(r"Click button (\w+)\.", instruction):
        return Action("click", target=_the(lines, "button", m.group(1)).id)
    if re.fullmatch(r'Click on the ".*" button\.', instruction):
        return Action("click", target=_the(lines, "button", q[0]).id)
    if re.fullmatch(r'Click on the link ".*"\.', instruction):
        return Action("click", target=_the(lines, "link", q[0]).id)
    if (m := re.fullmatch(r"Select (.*) and click Submit\.", instruction)) and " from the " not in instruction:
        names = set() if m.group(1) == "nothing" else set(m.group(1).split(", "))
        role = "radio" if _first(lines, "radio") else "checkbox"
        return _toggle(lines, role, names)
    if instruction == 'Close the dialog box by clicking the "x".':
        return Action("click", target=_the(lines, "button", "Close").id)
    if re.fullmatch(r'Click the button in the dialog box labeled ".*"\.', instruction):
        return Action("click", target=_the(lines, "button", "Close" if q[0] == "x" else q[0]).id)
    if m := re.fullmatch(r"Click on (Tab #\d+)\.", instruction):
        return Action("click", target=_the(lines, "tab", m.group(1)).id)
    if re.fullmatch(r'Switch between the tabs to find and click on the link ".*"\.', instruction):
        link = _first(lines, "link", q[0])
        if link is not None:
            return Action("click", target=link.id)
        tabs = [x for x in lines if x.id and x.role == "tab"]
        now = next(i for i, x in enumerate(tabs) if x.state == "selected")
        return Action("click", target=tabs[(now + 1) % len(tabs)].id)
    if re.fullmatch(r'Click on a ".*" widget\.', instruction):
        return Action("click", target=_the(lines, WIDGETS[q[0]]).id)
    if instruction == "Expand the section below and click submit.":
        section = next(x for x in lines if x.id and x.role == "tab" and x.text.startswith("Section"))
        return Action("click", target=section.id) if section.state != "selected" else _submit(lines)
    if re.fullmatch(r'Enter ".*" into the text field and press Submit\.', instruction):
        return _fill(lines, [(_the(lines, "textbox"), q[0])])
    if m := re.fullmatch(
        r'Type ".*" in all (lower|upper) case letters in the text input and press Submit\.', instruction
    ):
        word = q[0].lower() if m.group(1) == "lower" else q[0].upper()
        return _fill(lines, [(_the(lines, "textbox"), word)])
    if re.fullmatch(r'Enter the password ".*" into both text fields and press submit\.', instruction):
        return _fill(lines, [(x, q[0]) for x in lines if x.id and x.role == "textbox"])
    if re.fullmatch(
        r'Enter the username ".*" and the password ".*" into the text fields and press login\.', instruction
    ):
        boxes = [(_after_label(lines, "Username"), q[0]), (_after_label(lines, "Password"), q[1])]
        return _fill(lines, boxes, submit="Login")
    if instruction == "Focus into the textbox.":
        return Action("click", target=_the(lines, "textbox").id)
    if m := re.fullmatch(r"Focus into the (\w+) input textbox\.", instruction):
        return Action("click", target=[x for x in lines if x.id and x.role == "textbox"][ORDINALS[m.group(1)]].id)
    if m := re.fullmatch(r"Select (.*) from the list and click Submit\.", instruction):
        box = _the(lines, "combobox")
        return Action("select", target=box.id, value=m.group(1)) if box.state != m.group(1) else _submit(lines)
    if m := re.fullmatch(r"Select (.*) from the scroll list and click Submit\.", instruction):
        box = _the(lines, "listbox")
        chosen = set(box.state.split(", ")) if box.state else set()
        for name in m.group(1).split(", "):
            if name not in chosen:
                return Action("select", target=box.id, value=name)
        return _submit(lines)
    if instruction.startswith("Enter an item that starts with"):
        start, end = q[0], (q[1] if len(q) > 1 else "")
        box = _the(lines, "textbox")
        fits = [x for x in lines if x.id and x.role == "button" and x.text.startswith(start) and x.text.endswith(end)]
        done = box.state.startswith(start) and box.state.endswith(end) and len(box.state) >= len(start)
        if done and (len(box.state) > len(start) or not fits):  # the item itself may be the typed start
            return _submit(lines)
        if fits:
            return Action("click", target=fits[0].id)
        return Action("type", target=box.id, value=start) if box.state != start else Action("wait")
    if instruction.startswith("Solve the math problem"):
        problem = next(x.text for x in lines if not x.id and x.text.endswith("="))
        a, op, b = problem.removesuffix("=").split()
        return _fill(lines, [(_the(lines, "textbox"), str(OPS[op](int(a), int(b))))])
    return None


def answer(context: str) -> str:
    """The oracle's output for a policy context (the last observation in it decides)."""
    instruction, lines = last_observation(context)
    action = solve(instruction, lines)
    if action is None:
        return format_output(Action("wait"), [], "no rule for this task")
    return format_output(action, [instruction], "oracle")
