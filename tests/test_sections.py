"""The report's sections are declared once (analysis.report.sections): the template writes every
heading and the navigation from that declaration, every answer's question is its section's title,
and the second round plans repeats for exactly the ratios the sections compare."""

import re

from analysis.repeats import second_round
from analysis.report import answers, sections
from tests.helpers import REPO

TEMPLATE = (REPO / "analysis" / "report" / "templates" / "report.html.j2").read_text()


def test_every_section_of_the_page_is_declared_in_page_order():
    ids = re.findall(r'<section id="([\w-]+)"', TEMPLATE)
    assert ids == [s.key for s in sections.SECTIONS]


def test_headings_come_from_the_declaration_only():
    assert not re.findall(r"<h2>(?!\{\{)", TEMPLATE), "a heading written out in the template"
    keys = re.findall(r'heading\("([\w-]+)"\)', TEMPLATE)
    assert set(keys) <= set(sections.by_key()) and len(keys) == len(set(keys))
    # the navigation is one loop over the sections, not a second list of titles
    nav = TEMPLATE[TEMPLATE.index("<nav>"):TEMPLATE.index("</nav>")]
    assert nav.count("<a ") == 1 and "sections" in nav


def test_an_answer_asks_its_sections_question():
    a = answers.Answer("scaling")
    assert a.label == sections.title("scaling") == "How far does each framework scale?"
    assert {key for key, *_ in answers.AXES.values()} <= set(sections.by_key())


def test_the_second_round_plans_for_the_ratios_the_sections_compare():
    declared = {axis for s in sections.SECTIONS for axis in s.ratios()}
    assert set(sections.ratios()) == declared >= {"framework:pyg", "devices", "workers", "batch_size"}
    assert sections.ratios()["devices"].words == "2 devices over 1"
    # with the two frameworks of today, the one framework ratio is PyG over DGL, as before
    framework = {a: r for a, r in sections.ratios().items() if r.column == "framework" and not r.numerator_variant}
    assert [(r.numerator, r.denominator, r.words) for r in framework.values()] == [("pyg", "dgl", "PyG over DGL")]
