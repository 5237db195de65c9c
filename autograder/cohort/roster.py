"""A class list (`report --roster roster.csv`) that gives each submission its students.

A plain folder names submissions after files (`ana.py`), so its cohort knows no SID or email,
and LMS imports cannot match such rows. The roster is a CSV file, UTF-8 (with or without a BOM,
as Excel's "CSV UTF-8" writes it), comma-, semicolon- or tab-separated, with a header row. Its
columns, by header (case and accents as written here, or the alternatives in ALIASES):

  key      the submission's key in the cohort: its file or folder name (`ana.py`, `ana`), or
           that name without .py/.zip/.ipynb; for a Gradescope export, `submission_N`
  name     the student's full name
  sid      student id (Canvas "SIS User ID", Moodle "ID number", Gradescope "SID")
  email    email address (Moodle and Gradescope match on it)
  login    login / username (Canvas "SIS Login ID", Moodle "username")      optional
  section  Canvas section name                                              optional

A row matches the submissions whose key, or key without suffix, equals its key (or its key
without suffix), Unicode-normalized (NFC); failing that, the same case-insensitively. A row that
matches several submissions (`ana` beside `ana.py` and a folder `ana`, or `Ana` beside `ana.py`
and `ANA.ipynb`) matches none: it is listed in the report's warnings and exports no grade. A row with an empty key matches a submission whose stored submitters
(a Gradescope export's) have the same email, or else the same sid. Several rows with the same
key are a group: each becomes a row of the gradebook. A roster row that matches no submission
is a student without one ("no submission" rows); a submission no row matches keeps its stored
names and is listed in the report's warnings.
"""
from __future__ import annotations

import csv
import io
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..text import clean, composed

SUFFIXES = (".py", ".zip", ".ipynb")  # what a submission may be, beside a folder (batch reads these)
ALIASES = {
    "key": ("key", "submission", "file", "folder", "clave", "entrega", "archivo", "carpeta"),
    "name": ("name", "full name", "student", "nombre", "nombre completo", "estudiante", "first name", "given name",
             "nombres", "nombre(s)", "sortable name", "last name, first name", "apellido, nombre",
             "apellidos, nombre", "apellidos y nombres"),
    "surname": ("surname", "last name", "family name", "apellido", "apellidos", "apellido(s)"),  # joined after name
    "sid": ("sid", "student id", "sis user id", "id number", "idnumber", "matricula", "legajo", "rut", "dni",
            "numero de id", "numero de identificacion"),
    "email": ("email", "e-mail", "mail", "email address", "correo", "correo electronico", "direccion de correo",
              "direccion email", "direccion de correo electronico", "direccion de email"),
    "login": ("login", "username", "user", "sis login id", "usuario", "nombre de usuario"),
    "section": ("section", "seccion", "grupo"),
}


class RosterError(UsageError):
    """The roster file cannot be read, or lacks the columns to match submissions by."""


@dataclass(frozen=True)
class Person:
    """A student as the reports show and export them (Submitter's fields, and a roster's extra two)."""

    name: str = ""
    email: str = ""
    sid: str = ""
    login: str = ""
    section: str = ""


@dataclass(frozen=True)
class Roster:
    rows: tuple  # (key, Person), in file order
    path: str = ""


def _plain(header):
    """A header as compared with ALIASES: lowercase, accents dropped, `_` and runs of spaces as one space."""
    text = unicodedata.normalize("NFKD", header.strip().lower().lstrip("\ufeff"))
    text = "".join(c for c in text if not unicodedata.combining(c)).replace("_", " ")
    return " ".join(text.split())


def read(path):
    """The roster at `path` (RosterError if unreadable, not UTF-8, or without key, email and sid columns)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RosterError(f"cannot read the roster {path}: {exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise RosterError(f"{path} is not UTF-8: save it as 'CSV UTF-8' and try again") from None
    try:  # only the delimiter is read off the header: quoting is Excel's (a doubled "" is one ")
        delimiter = csv.Sniffer().sniff(text.partition("\n")[0], delimiters=",;\t").delimiter
    except csv.Error:
        delimiter = ","
    table = list(csv.reader(io.StringIO(text, newline=""), csv.excel, delimiter=delimiter))
    if not table:
        raise RosterError(f"{path} is empty")
    columns = {}
    for index, header in enumerate(table[0]):
        for field, names in ALIASES.items():
            if _plain(header) in names and field not in columns:
                columns[field] = index
    if not {"key", "email", "sid"} & columns.keys():
        raise RosterError(f"{path}: no 'key', 'email' or 'sid' column to match submissions by "
                          f"(its header: {', '.join(table[0])})")
    rows, shifted = [], []
    for number, line in enumerate(table[1:], 2):
        values = {f: clean(line[i]).strip() if i < len(line) else "" for f, i in columns.items()}
        if not any(values.values()):
            continue
        if len(line) < len(table[0]) or any(cell.strip() for cell in line[len(table[0]):]):
            shifted.append(f"{number} ({len(line)})")
            continue
        name = " ".join(part for part in (values.get("name", ""), values.get("surname", "")) if part)
        person = Person(name, values.get("email", ""), values.get("sid", ""), values.get("login", ""),
                        values.get("section", ""))
        rows.append((values.get("key", ""), person))
    if shifted:  # a separator missing or one too many moves every later cell into another column
        raise RosterError(f"{path}: the header has {len(table[0])} cells, but line(s) {', '.join(shifted[:10])}"
                          f"{', …' if len(shifted) > 10 else ''} have another number (in brackets): a missing or "
                          "extra separator would put a value under another column (an email as the SID); leave "
                          "an empty cell empty between its separators, and quote a value holding one")
    return Roster(tuple(dict.fromkeys(rows)), str(path))  # a row pasted twice is one student


def stem(key):
    """A key without its submission suffix: `ana.py` -> `ana` (folders stay as they are)."""
    base, dot, suffix = key.rpartition(".")
    return base if dot and base and f".{suffix.lower()}" in SUFFIXES else key


@dataclass
class Joined:
    """What a roster did to a cohort: people per submission key, and what did not match."""

    people: dict  # key -> [Person]
    missing: list  # Person of roster rows that match no submission
    unmatched: list  # submission keys no roster row matches
    ambiguous: list  # (roster key, [submission keys]) of rows that match several submissions


def join(roster, submissions):
    """Match roster rows to `submissions` ({key: stored submitters}); see the module's docstring."""
    by_name, by_folded, by_email, by_sid = {}, {}, {}, {}
    for key, people in submissions.items():
        for name in {composed(key), composed(stem(key))}:  # `ana.py` and a folder `ana` are both "ana"
            by_name.setdefault(name, []).append(key)
        for name in {composed(key).casefold(), composed(stem(key)).casefold()}:
            by_folded.setdefault(name, []).append(key)
        for person in people:
            if person.email:
                by_email.setdefault(person.email.casefold(), []).append(key)
            if person.sid:
                by_sid.setdefault(person.sid, []).append(key)
    if not any(key for key, _ in roster.rows) and not by_email and not by_sid:
        raise RosterError(f"{roster.path or 'the roster'}: no 'key' column, and this cohort's submissions carry no email or SID "
                          "(a plain folder: they are known by file name): add a 'key' column with each file's name")
    joined = Joined({}, [], [], [])
    for key, person in roster.rows:
        if key:  # as written first: `luis` and `LUIS` are two students when both submitted
            found = (by_name.get(composed(key)) or by_name.get(composed(stem(key)))
                     or by_folded.get(composed(key).casefold()) or by_folded.get(composed(stem(key)).casefold(), []))
        else:
            found = by_email.get(person.email.casefold(), []) if person.email else []
            found = found or (by_sid.get(person.sid, []) if person.sid else [])
        found = list(dict.fromkeys(found))
        if not found:
            joined.missing.append(person)
            continue
        if len(found) > 1:  # no grade is exported for a row that could be several students'
            joined.ambiguous.append((key or person.email or person.sid, found))
            continue
        for match in found:
            joined.people.setdefault(match, []).append(person)
    joined.unmatched = [key for key in submissions if key not in joined.people]
    return joined
