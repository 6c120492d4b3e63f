"""Each documented refusal (``refusals.REFUSALS``): the right ``KstoreError`` subclass, a
message naming the column and its type, and nothing written."""

from __future__ import annotations

import re

import pytest

import kstore
from kstore.errors import KstoreError
from tests.conformance.drivers import SPARK_GROUP
from tests.conformance.refusals import REFUSALS

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::DeprecationWarning",
                                        "ignore::UserWarning")

GROUPS = {"spark": SPARK_GROUP, "dask": "dask-conformance"}


def _cases():
    for r in REFUSALS:
        group = GROUPS.get(r.driver) if r.driver == "spark" or "processes" in r.id else None
        yield pytest.param(r, id=r.id, marks=[pytest.mark.xdist_group(group)] if group else [])


def _error_chain(exc: BaseException) -> list[BaseException]:
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def test_every_refusal_is_documented_once():
    ids = [r.id for r in REFUSALS]
    assert len(ids) == len(set(ids))
    assert all(r.what and r.match and issubclass(r.error, KstoreError) for r in REFUSALS)
    assert {r.driver for r in REFUSALS} == {"eager", "dask", "spark"}


@pytest.mark.parametrize("refusal", list(_cases()))
def test_refusal(refusal, engines, tmp_path):
    url = "file://" + str(tmp_path / "store")
    (tmp_path / "store").mkdir()
    with pytest.raises(Exception) as info:
        refusal.attempt(engines, url)
    # Spark wraps errors raised in its Python workers; the kstore error is in the chain or the text
    chain = _error_chain(info.value)
    typed = [e for e in chain if isinstance(e, refusal.error)]
    text = "\n".join(str(e) for e in chain)
    assert typed or (refusal.driver == "spark" and refusal.error.__name__ in text), (refusal.id, text[:500])
    assert re.search(refusal.match, text), (refusal.id, text[:500])
    if refusal.stage == "write":
        left = [k for k in kstore.open_store(url).iter_prefix("") if k.startswith("refused")]
        assert left == [], f"{refusal.id}: a refused write left {left}"
