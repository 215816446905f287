"""trace_timeline.name_mask: a question about names answered on a categorical column's categories gives the same
rows as asking every row's string."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import diagnose.derive.trace_timeline as tl
from parsers.trace import read_trace
from tests.paths import FIXTURES


@pytest.mark.parametrize(
    "test",
    [
        lambda n: n.str.startswith("aten::"),
        lambda n: n.str.contains("Backward", regex=False),
        lambda n: n.str.match(r"^autograd::engine::evaluate_function: .+$"),
        lambda n: n.str.startswith(("cudaMalloc", "cudaFree")),
    ],
)
def test_categories_and_rows_agree_on_a_real_trace(test):
    trace = read_trace(FIXTURES / "trace" / "no_profilerstep" / "sgd_nostacks.json.gz")
    for table in (trace.cpu_ops, trace.runtime):
        names = table["name"]
        assert isinstance(names.dtype, pd.CategoricalDtype)
        expected = np.asarray(test(names.astype(str)), dtype=bool)
        assert (tl.name_mask(names, test) == expected).all()
    ops = trace.cpu_ops["name"]
    assert tl.name_mask(ops, lambda n: n.str.startswith("aten::")).sum() > 100  # the question has answers here


def test_plain_string_column():
    names = pd.Series(["aten::mm", "cudaMalloc", None, "aten::add_"], dtype=object)
    assert tl.name_mask(names, lambda n: n.str.startswith("aten::")).tolist() == [True, False, False, True]
