"""A long benchmark's answers, kept as they are made, so that a killed run resumes.

A run over hundreds of questions takes hours on a CPU. :class:`AnswerJournal` appends each
finished question's answers (every method's) to ``<folder>/answers.jsonl`` as one line, flushed
to disk, beside ``settings.json``: what the answers and their timings depend on (the run's
arguments, the package's code, the machine; the caller decides). A run started again with the
same settings skips the questions the journal holds; one with other settings is refused, naming
them, so answers made under two settings never mix. Only the last line may be cut off (by a
kill): it is dropped and its question answered again; any other damage is refused by name. The
provenance of the run that began the journal is kept in ``started.json``. The run writes its
results whole at the end, then removes the journal (:meth:`AnswerJournal.remove`): nothing
half-written is ever a result.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from skipdecode.io import write_json_atomic, write_text_atomic

__all__ = ["AnswerJournal"]

_MISSING = "(not set)"


class AnswerJournal:
    """The answers of the questions finished so far, per question id and method."""

    def __init__(
        self, folder: Path, settings: dict[str, Any], started: dict[str, Any] | None = None
    ):
        self.folder = Path(folder)
        self.settings = json.loads(json.dumps(settings, default=str))
        self.done: dict[str, dict[str, Any]] = {}
        settings_file, answers_file = self.folder / "settings.json", self.folder / "answers.jsonl"
        if not settings_file.is_file():
            if answers_file.is_file():
                raise ValueError(
                    f"{answers_file} has no {settings_file.name} beside it, so its answers' "
                    "settings are unknown; remove the folder to start over"
                )
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.folder / "started.json", started or {})
            write_json_atomic(settings_file, self.settings)
            write_text_atomic(answers_file, "")
            return
        self._check_settings(_read_json(settings_file))
        lines = answers_file.read_text().splitlines() if answers_file.is_file() else []
        kept = []
        for number, line in enumerate(lines, 1):
            try:
                entry = json.loads(line)
                self.done[str(entry["question_id"])] = entry["answers"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                if number == len(lines) and isinstance(err, json.JSONDecodeError):
                    break  # the line a kill cut off: that question is answered again
                raise ValueError(
                    f"{answers_file} line {number} is not a journal entry ({err!r}; allowed: "
                    '{"question_id": ..., "answers": {method: answer}}); remove the folder to '
                    "start over"
                ) from err
            kept.append(line + "\n")
        write_text_atomic(answers_file, "".join(kept))

    def _check_settings(self, before: dict[str, Any]) -> None:
        changed = sorted(
            k for k in set(before) | set(self.settings) if before.get(k) != self.settings.get(k)
        )
        if changed:
            what = "; ".join(
                f"{k}: {before.get(k, _MISSING)!r} there, {self.settings.get(k, _MISSING)!r} now"
                for k in changed
            )
            raise ValueError(
                f"{self.folder} holds answers of a run with other settings ({what}); resume it "
                "with the same arguments, code and machine, or remove the folder to start over"
            )

    @property
    def started(self) -> dict[str, Any]:
        """The provenance of the run that began this journal ({} where none was kept)."""
        path = self.folder / "started.json"
        return _read_json(path) if path.is_file() else {}

    def answers(self, question_id: Any) -> dict[str, Any] | None:
        """Every method's answer to the question, if the journal holds it."""
        return self.done.get(str(question_id))

    def add(self, question_id: Any, answers: dict[str, Any]) -> None:
        """Keep one finished question's answers (every method's), on disk before returning."""
        line = json.dumps({"question_id": question_id, "answers": answers})
        with open(self.folder / "answers.jsonl", "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done[str(question_id)] = answers

    def remove(self) -> None:
        """Drop the journal (its run's results are written)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} cannot be read as JSON ({err}); remove its folder to start over"
        ) from err
