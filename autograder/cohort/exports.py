"""Gradebook files that LMSs import as they are: Canvas, Moodle and Gradescope (`report --format`).

Each is written from the report's rows (one per student; see report.Row) into the report folder.
Only a trustworthy score is exported: rows whose status is graded or unreadable (an unreadable
submission earns its 0). A grader failure or a roster student without a submission is left out
of Canvas and Moodle, because both importers treat an empty cell as "clear this grade", and is
written to Gradescope's file with an empty Total Score and its status. Text cells get the
gradebook's formula guard (report.text_cell). Which layout each follows, and where it is
documented, is said above each writer.

canvas.csv and moodle.csv start with a UTF-8 byte order mark, so that Excel shows accented
names right when a TA opens them first; both importers accept it (cited below).
gradescope.csv is plain UTF-8, as Gradescope's roster guide asks.
"""
from __future__ import annotations

import argparse
import csv

from ..text import composed

FORMATS = ("canvas", "moodle", "gradescope")
DEFAULT_ASSIGNMENT = "Attention"
SCORED = ("graded", "unreadable")


def assignment_title(text):
    """--assignment as argparse reads it: the score column's title in canvas.csv and moodle.csv, one
    line of text that no spreadsheet takes for a formula (the guard's quote would become part of the
    title in the LMS)."""
    if not text.strip() or any(c in text for c in "\n\r\t") or text.startswith(("=", "+", "-", "@")):
        raise argparse.ArgumentTypeError(f"{text!r} cannot title a score column: give one line of text that does "
                                         "not start with =, +, - or @, e.g. 'Tarea 2'")
    return text


def _number(value):
    return "" if value is None else f"{value:g}"


def _people(rows):
    return ", ".join(r.name or r.key for r in rows[:10]) + (f" (+{len(rows) - 10})" if len(rows) > 10 else "")


def _shared_identifiers(rows, words):
    """A warning for each SID or email that more than one row carries (a re-upload graded under
    another key, a roster naming one SID twice), and for each name that rows with neither carry
    (`josé.py` spelled two ways in one folder: two keys, one name, which Canvas matches by): an
    LMS keeps one of those rows, not the one the staff would choose."""
    warnings = []
    for field in ("sid", "email", "name"):
        sharing = {}
        for row in rows:
            value = getattr(row, field).strip()
            if value and (field != "name" or not (row.sid or row.email or row.login)):
                sharing.setdefault(composed(value).casefold(), []).append(row)
        for value, same in sharing.items():
            if len(same) > 1:
                warnings.append(words["warning_shared_identifier"].format(
                    what=words["identifiers"][field], value=getattr(same[0], field).strip(), count=len(same),
                    keys=", ".join(row.key for row in same[:10])))
    return warnings


def _open(private_file, path, bom):
    handle = private_file(path)
    if bom:
        handle.write("\ufeff")
    return handle


# Canvas: the gradebook CSV import (Grades > Import). Layout as Canvas's own importer reads it,
# instructure/canvas-lms app/models/gradebook_importer.rb (GradebookImporter#header?,
# #update_column_count, #check_for_non_student_row, #process_student): the header is
# `Student, ID, SIS User ID, SIS Login ID, Section, <assignment>...` (the column before the
# assignments must be "Section"); a row whose first cell holds "Points Possible" gives each
# assignment's points (used when the import creates the assignment); each student row is matched
# by the Canvas ID if present, else SIS User ID, else SIS Login ID, else the name; an assignment
# column matches an existing assignment by "Title (id)" or by its title, otherwise Canvas creates
# it. The same required columns are listed in Ohio State's guide "Import a CSV File into Carmen
# Grades" (teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/
# import-csv-file-carmen-grades). The header test is `row[0].include?("Student")`, so the BOM
# before "Student" does no harm. We leave ID empty (a Canvas-internal number we do not know): SID
# goes to SIS User ID, the roster's login to SIS Login ID, its section to Section.
def write_canvas(path, rows, assignment, possible, private_file, text_cell):
    written, unknown, left_out = 0, [], []
    with _open(private_file, path, bom=True) as handle:
        writer = csv.writer(handle)
        writer.writerow(["Student", "ID", "SIS User ID", "SIS Login ID", "Section", assignment])
        writer.writerow(["    Points Possible", "", "", "", "", _number(possible)])
        for row in rows:
            if row.status not in SCORED:
                left_out.append(row)
                continue
            if not (row.sid or row.login):
                unknown.append(row)
            writer.writerow([*map(text_cell, (row.name or row.key, "", row.sid, row.login, row.section)),
                             _number(row.earned)])
            written += 1
    return written, [("canvas.csv", "SIS User ID / SIS Login ID", "Canvas", unknown, "warning_name_only")], left_out


# Moodle: Grades > Import > CSV file. MoodleDocs "Grade import" (docs.moodle.org/311/en/Grade_import):
# the file is mapped in the import form, "Map from" a column of the file "Map to" a user field
# (userid, useridnumber, useremail, username), and each other column to a grade item (or a new
# one named after its header). The mapping targets and the skipping of a row whose map-from
# cell is empty are in moodle grade/import/csv/classes/load_data.php
# (map_user_data_with_value); an empty or "-" grade is imported as no grade, so rows without a
# score are left out. lib/csvlib.class.php (csv_import_reader::load_csv_content) strips a UTF-8
# BOM. Map "Email address" to useremail, or "ID number" to useridnumber, or "Username" to username.
def write_moodle(path, rows, assignment, private_file, text_cell):
    written, unknown, left_out = 0, [], []
    with _open(private_file, path, bom=True) as handle:
        writer = csv.writer(handle)
        writer.writerow(["Full name", "ID number", "Email address", "Username", assignment])
        for row in rows:
            if row.status not in SCORED:
                left_out.append(row)
                continue
            if not (row.email or row.sid or row.login):
                unknown.append(row)
            writer.writerow([*map(text_cell, (row.name or row.key, row.sid, row.email, row.login)),
                             _number(row.earned)])
            written += 1
    return written, [("moodle.csv", "Email address / ID number / Username", "Moodle", unknown, "warning_no_identifier")], \
        left_out


# Gradescope: a roster upload and its grade layout. Gradescope Guides "Adding Students and Staff"
# (guides.gradescope.com/hc/en-us/articles/21926598776333): a roster CSV has a header row, a full
# name column (or first and last), a unique email per member, optionally SID and section
# columns, matched to Gradescope's fields on upload, and is saved as UTF-8 when names carry
# accents. The score columns are those that open Gradescope's own assignment grade export
# (Review Grades > Download Grades): `Name, SID, Email, Total Score, Max Points, Status`, Status
# being Graded, Ungraded or Missing. Gradescope publishes no spec of that export; this is its
# header as tools that read it expect it (e.g. the `SCORES_CSV` fixtures of Gradescope clients
# and CS 161's grades-py README, which reads SID and the assignment columns from it). Every row
# is written; Total Score is empty unless the score is trustworthy.
GRADESCOPE_STATUS = {"graded": "Graded", "unreadable": "Graded", "grader_failure": "Ungraded", "missing": "Missing"}


def write_gradescope(path, rows, private_file, text_cell):
    unknown = []
    with _open(private_file, path, bom=False) as handle:
        writer = csv.writer(handle)
        writer.writerow(["Name", "SID", "Email", "Total Score", "Max Points", "Status"])
        for row in rows:
            if not row.email:
                unknown.append(row)
            writer.writerow([*map(text_cell, (row.name or row.key, row.sid, row.email)),
                             _number(row.earned if row.status in SCORED else None), _number(row.possible),
                             GRADESCOPE_STATUS.get(row.status, "Ungraded")])
    return len(rows), [("gradescope.csv", "Email", "Gradescope", unknown, "warning_no_identifier")], []


def write(out, formats, rows, assignment, possible, private_file, text_cell, words):
    """Write the chosen formats into `out`; returns the warnings, in the report's words. Rows not
    to be exported (submissions a roster does not name) are in gradebook.csv only."""
    rows = [row for row in rows if row.exported]
    warnings = _shared_identifiers(rows, words) if formats else []
    for name in formats:
        if name == "canvas":
            _, missing, left_out = write_canvas(out / "canvas.csv", rows, assignment, possible, private_file, text_cell)
        elif name == "moodle":
            _, missing, left_out = write_moodle(out / "moodle.csv", rows, assignment, private_file, text_cell)
        else:
            _, missing, left_out = write_gradescope(out / "gradescope.csv", rows, private_file, text_cell)
        for file, what, platform, unknown, template in missing:
            if unknown:
                warnings.append(words[template].format(
                    file=file, count=len(unknown), what=what, platform=platform, names=_people(unknown)))
        if left_out:
            warnings.append(words["warning_excluded"].format(file=f"{name}.csv", count=len(left_out),
                                                             names=_people(left_out)))
    return warnings
