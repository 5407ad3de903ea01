"""junit.xml: one testcase per classification rule, so CI systems show the verdict natively."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from loadrepro.schema.report_kinds import Severity
from loadrepro.schema.run_report import RunReport


def render_junit(report: RunReport) -> str:
    failed = [r for r in report.rules if r.fired and r.severity == Severity.FAIL]
    suite_name = f"loadrepro.{report.profile['name']}.{report.label}"
    suites = ET.Element("testsuites", name="loadrepro", tests=str(len(report.rules)), failures=str(len(failed)),
                        errors="0", time=f"{report.duration_s:.3f}")
    suite = ET.SubElement(suites, "testsuite", name=suite_name, tests=str(len(report.rules)),
                          failures=str(len(failed)), errors="0", skipped="0", time=f"{report.duration_s:.3f}",
                          timestamp=report.started_at)
    for rule in report.rules:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=rule.name, time="0")
        if rule.fired and rule.severity == Severity.FAIL:
            failure = ET.SubElement(case, "failure", message=rule.detail, type="loadrepro.rule")
            failure.text = rule.detail
        elif rule.fired:
            ET.SubElement(case, "system-out").text = rule.detail
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
