"""Errors the program raises on purpose reach the user as Pulumi's Python host prints them: the message
alone, never a traceback (tests/rules/language_host.py, ported from pulumi-language-python-exec). The port
is shown printing a traceback for an error that is not a `pulumi.RunError`."""

from __future__ import annotations

import json
import runpy

import pytest
from language_host import UNHANDLED, host_errors

from components import program
from components.config import loader
from pulumi_harness import ROOT, render_program, stack_file_config


def run_main(stack: str, **changes) -> None:
    """The real entry point (__main__.py) under mocks, with some `mlfleet:` keys changed."""
    values = stack_file_config(stack)
    values.update({f"mlfleet:{k}": v if isinstance(v, str) else json.dumps(v) for k, v in changes.items()})
    render_program(lambda: runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__"), stack, values)


BAD_CONFIG = {"regions": ["us-east-9"], "colour": "x"}
BAD_CONFIG_MESSAGE = ("stack 'dev' has 2 configuration error(s):\n"
                      "  - mlfleet:regions[0]: 'us-east-9' is not an AWS region mlfleet knows\n"
                      "  - mlfleet:colour: unknown key")


def test_a_config_error_is_printed_as_its_message_alone():
    assert host_errors(lambda: run_main("dev", **BAD_CONFIG)) == [BAD_CONFIG_MESSAGE]


def test_a_program_error_is_printed_as_its_message_alone(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{not json")
    monkeypatch.setattr(program, "PACKER_MANIFEST", manifest)
    (message,) = host_errors(lambda: run_main("dev"))
    assert "make ami ENV=dev" in message and "Traceback" not in message


def test_a_config_error_that_is_not_a_run_error_would_print_a_traceback(monkeypatch):
    """The finding of issue 12 on a broken copy: ConfigError as the plain ValueError it used to be."""
    class PlainConfigError(ValueError):
        pass

    monkeypatch.setattr(loader, "ConfigError", PlainConfigError)
    errors = host_errors(lambda: run_main("dev", **BAD_CONFIG))
    assert errors[0] == UNHANDLED
    assert errors[1].startswith("Traceback (most recent call last):")
    assert errors[1].rstrip().endswith(BAD_CONFIG_MESSAGE.splitlines()[-1])


@pytest.mark.parametrize("error", [KeyError("x"), TypeError("y")])
def test_the_port_reports_any_other_exception_with_its_traceback(error):
    def fail():
        raise error
    errors = host_errors(fail)
    assert errors[0] == UNHANDLED and type(error).__name__ in errors[1]
    assert host_errors(lambda: None) == []
