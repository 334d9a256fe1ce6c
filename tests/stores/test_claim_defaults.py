"""A claim's defaults are the job options' defaults: ``Store.claim``, ``ClaimRequest`` and
``leasecron.options.DEFAULTS`` agree, so a claim sent with the defaults is a claim of a job
with the default options."""

from __future__ import annotations

import dataclasses
import inspect

from leasecron import Store
from leasecron.options import DEFAULTS
from leasecron.stores import ClaimRequest

#: The claim's arguments that are job options.
OPTIONS = ("lease_ms", "max_attempts", "max_late_ms", "overlap", "history_size")


def test_claim_request_and_store_claim_default_to_the_job_options_defaults() -> None:
    """Every default of ``Store.claim`` is ``ClaimRequest``'s, and each option's is ``DEFAULTS``'s."""
    signature = {
        name: parameter.default
        for name, parameter in inspect.signature(Store.claim).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    fields = {f.name: f.default for f in dataclasses.fields(ClaimRequest) if f.default is not dataclasses.MISSING}
    assert fields.pop("brief") is False  # the request's own: Store.claim always answers the whole run
    assert signature == fields
    assert {name: fields[name] for name in OPTIONS} == {name: DEFAULTS[name] for name in OPTIONS}
    assert inspect.signature(Store.request_run).parameters["max_late_ms"].default == DEFAULTS["max_late_ms"]
