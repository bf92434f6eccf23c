"""The suite renders the program without the stack traces the Pulumi SDK sends the engine
(tests/pulumi_harness.py, without_stack_traces): the mocks' monitor never reads them, so a stack renders the
same with them."""

from __future__ import annotations

import pulumi.runtime.resource
import pulumi_harness
import pytest
from pulumi.runtime.proto import source_pb2
from pulumi_harness import render_stack


def test_the_suite_sends_no_stack_trace():
    assert pulumi.runtime.resource._get_stack_trace() == source_pb2.StackTrace()


def test_a_stack_renders_the_same_with_the_sdk_s_stack_traces():
    without = render_stack("prod")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pulumi.runtime.resource, "_get_stack_trace", pulumi_harness.SDK_STACK_TRACE)
        with_traces = render_stack("prod")
    assert with_traces.snapshot() == without.snapshot()
    assert with_traces.outputs == without.outputs and with_traces.options == without.options
    assert sorted(with_traces.warnings) == sorted(without.warnings)  # warnings come in the order outputs resolve


def test_the_sdk_s_own_sends_the_declaring_frames():
    sent = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pulumi.runtime.resource, "_get_stack_trace",
                      lambda: sent.append(pulumi_harness.SDK_STACK_TRACE()) or sent[-1])
        render_stack("dev")
    assert sent and all(trace.frames for trace in sent), "the comparison above would compare nothing"
