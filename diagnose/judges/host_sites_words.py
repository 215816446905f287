"""The Python code the host ran while the GPU waited for it, said in a finding: idle's host-caused idle and the step
budget's launch-bound share name the same sites (diagnose.derive.host_sites, worked out once by
``Derived.host_sites``)."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from diagnose.derive.host_sites import NO_USER_FRAME, site_words, sites_text
from diagnose.findings import Evidence, Finding, Subject
from diagnose.formatting import share_human
from diagnose.judges.step_budget.common import short_location

HOST_SITES_SHOWN = 5  # the Python sites behind host-caused idle given as subjects
TITLE_SITE_MIN_SHARE = 0.5  # a site holding this share of the host-caused idle is named in the title too


def with_host_sites(
    finding: Finding, sites: pd.DataFrame, in_title: bool = False, loop: tuple[str, str] | None = None
) -> Finding:
    """``finding`` with the Python code the host was running while the GPU waited (traced steps): in its advice, each
    site as a subject and, with ``in_title``, the site that holds ``TITLE_SITE_MIN_SHARE`` of that idle in the title
    (its user site, over every library call under it: ``…; the host was in make_batch() in train.py:53 for 93 % of it``).
    ``loop``: (the jitted step function's name, the loop's line that calls it), light mode's record of a JAX loop
    without a marker: a module-level loop has no frame in the trace, and this names its line instead."""
    if not len(sites):
        return finding
    subjects = tuple(
        Subject(
            "location",
            r.user_site if not isinstance(r.library_site, str) else site_words(r.user_site, r.library_site),
            figures={"host_idle_share": float(r.share), "host_idle_ms": float(r.idle_ns) / 1e6},
        )
        for r in sites.head(HOST_SITES_SHOWN).itertuples()
    )
    title, evidence = finding.title, finding.evidence
    by_user = sites.groupby("user_site", sort=False)["share"].sum().sort_values(ascending=False, kind="stable")
    user, share = by_user.index[0], float(by_user.iloc[0])
    if in_title and share >= TITLE_SITE_MIN_SHARE and user != NO_USER_FRAME:
        title += f"; the host was in {user} for {share_human(share, 0)} of it"
        evidence = (*evidence, Evidence("host_site_share", share, "share", TITLE_SITE_MIN_SHARE))
    elif (
        in_title
        and float(sites.iloc[0]["share"]) >= TITLE_SITE_MIN_SHARE
        and isinstance(sites.iloc[0]["library_site"], str)
    ):
        # no user frame in the trace: module-level code, whose frame began before the trace window
        top = sites.iloc[0]
        evidence = (*evidence, Evidence("host_site_share", float(top["share"]), "share", TITLE_SITE_MIN_SHARE))
        where = (
            f"the loop that calls {loop[0]}() at {short_location(loop[1])}"
            if loop and loop[1]
            else "code the trace holds no frame of (module-level lines)"
        )
        title += (
            f"; the host was in {top['library_site']} for {share_human(top['share'], 0)} of it, called from {where}"
        )
    return replace(
        finding,
        title=title,
        evidence=evidence,
        subjects=(*finding.subjects, *subjects),
        recommendation=f"While the GPU waited, the host was in (traced steps, share of that idle): "
        f"{sites_text(sites)}. {finding.recommendation}",
    )
