"""Ten Chromium sessions at once against one server: each gets its own correct translation and attention."""

import pytest

from benchmarks.load import load_test

pytestmark = pytest.mark.browser


def test_ten_concurrent_sessions_each_get_their_own_result():
    reports, log, _ = load_test(sessions=10)
    assert len(reports) == 10
    assert all(report.correct for report in reports), [r.sentence for r in reports if not r.correct]
    assert all(report.own_attention for report in reports), [r.sentence for r in reports if not r.own_attention]
    assert "Traceback" not in log and "Error" not in log, log
