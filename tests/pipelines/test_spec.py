"""A pipeline spec is validated field by field; every problem comes back at once with its dotted path."""

import pytest

from pipelines.spec import SpecError, parse_spec
from tests.pipelines.conftest import github_spec


def _errors(data, name="demo"):
    with pytest.raises(SpecError) as caught:
        parse_spec(data, pipeline_name=name)
    return caught.value.errors


def test_a_minimal_spec_gets_every_default_filled_in():
    spec = parse_spec(github_spec(), pipeline_name="demo")
    assert spec.source.consumer_group == "streamforge-demo"
    assert spec.source.starting_offsets == "earliest"
    assert spec.delivery.mode == "at_least_once"
    assert spec.delivery.commit_strategy.kind == "batch"
    assert spec.retry.max_attempts == 5
    assert spec.dlq.include_original_headers is True
    assert spec.error_handling.missing_field_behavior == "error"
    assert spec.destinations[0].timestamp == "PRESERVE"
    assert spec.output_topics() == ["github.pushes", "github.pull_requests", "github.events.dlq"]


def test_the_canonical_json_parses_back_to_the_same_spec():
    spec = parse_spec(github_spec(), pipeline_name="demo")
    assert parse_spec(spec.to_json(), pipeline_name="demo") == spec


def test_an_unparsable_filter_is_refused_with_its_field_and_position():
    data = github_spec()
    data["destinations"][1]["filter"] = "/type,=~,PullRequestEvent"
    errors = _errors(data)
    assert list(errors) == ["destinations.1.filter"]
    assert errors["destinations.1.filter"][0].startswith("DslParse at 6:")


def test_every_problem_is_reported_at_once():
    data = github_spec()
    data["source"]["topics"] = ["bad topic!"]
    data["destinations"][0]["transform"] = "NOPE:/x"
    data["retry"] = {"max_attempts": 0, "jitter": "lots"}
    data["delivery"] = {"mode": "exactly_twice"}
    errors = _errors(data)
    assert set(errors) >= {
        "source.topics.0",
        "destinations.0.transform",
        "retry.max_attempts",
        "retry.jitter",
        "delivery.mode",
    }


def test_kafka_auto_commit_is_refused_with_the_reason():
    data = github_spec()
    data["delivery"] = {"commit_strategy": {"kind": "auto"}}
    message = _errors(data)["delivery.commit_strategy.kind"][0]
    assert "auto-commit is refused" in message


def test_unknown_fields_are_refused_rather_than_ignored():
    data = github_spec()
    data["destinations"][0]["filtre"] = "/type,==,PushEvent"
    assert "destinations.0.filtre" in _errors(data)


def test_the_dlq_topic_must_differ_from_the_source_and_destinations():
    data = github_spec(dlq="github.pushes")
    assert "dlq.topic" in _errors(data)


def test_a_destination_may_not_write_back_to_its_source():
    data = github_spec(pushes="github.events")
    assert "destinations.0.topic" in _errors(data)


def test_a_boolean_is_not_accepted_where_a_number_is_expected():
    data = github_spec()
    data["retry"] = {"max_attempts": True}
    assert _errors(data)["retry.max_attempts"] == ["must be an integer, not a boolean"]


def test_retry_delays_grow_exponentially_within_the_jitter_band_and_stop_at_the_cap():
    data = github_spec()
    data["retry"] = {"initial_delay_ms": 100, "multiplier": 2, "max_delay_ms": 1000, "jitter": 0.2}
    retry = parse_spec(data, pipeline_name="demo").retry
    assert retry.delay_ms(1, 0.5) == 100
    assert retry.delay_ms(3, 0.5) == 400
    assert retry.delay_ms(10, 0.5) == 1000
    assert 80 <= retry.delay_ms(1, 0.0) <= retry.delay_ms(1, 0.999) <= 120


def _low_latency(data: dict, **delivery) -> dict:
    data["delivery"] = {"commit_strategy": {"kind": "low_latency"}, **delivery}
    return data


def test_low_latency_is_accepted_for_at_least_once_with_every_timestamp_defaulting_to_current():
    spec = parse_spec(_low_latency(github_spec()), pipeline_name="demo")
    assert spec.delivery.commit_strategy.kind == "low_latency"
    assert [d.timestamp for d in spec.destinations] == ["CURRENT", "CURRENT"]
    assert parse_spec(spec.to_json(), pipeline_name="demo") == spec


def test_low_latencys_interval_is_the_real_time_batch_duration_of_at_least_sparks_minimum():
    default = parse_spec(_low_latency(github_spec()), pipeline_name="demo").delivery.commit_strategy
    assert (default.interval_ms, default.realtime_batch_ms()) == (0, 5_000)
    data = _low_latency(github_spec())
    data["delivery"]["commit_strategy"]["interval_ms"] = 60_000
    assert parse_spec(data, pipeline_name="demo").delivery.commit_strategy.realtime_batch_ms() == 60_000
    data["delivery"]["commit_strategy"]["interval_ms"] = 4_999
    errors = _errors(data)
    assert list(errors) == ["delivery.commit_strategy.interval_ms"]
    assert "real-time batch duration, at least 5,000 ms" in errors["delivery.commit_strategy.interval_ms"][0]


@pytest.mark.parametrize("mode", ["effectively_once", "at_most_once"])
def test_low_latency_is_refused_for_any_other_delivery_mode(mode):
    errors = _errors(_low_latency(github_spec(), mode=mode))
    assert list(errors) == ["delivery.commit_strategy.kind"]
    assert f"only with delivery mode at_least_once, not {mode}" in errors["delivery.commit_strategy.kind"][0]


def test_low_latency_refuses_a_timestamp_rule_the_kafka_sink_cannot_honour():
    data = _low_latency(github_spec())
    data["destinations"][0]["timestamp"] = "PRESERVE"
    data["destinations"][1]["timestamp"] = "ADD:60"
    errors = _errors(data)
    assert set(errors) == {"destinations.0.timestamp", "destinations.1.timestamp"}
    assert "only CURRENT is possible" in errors["destinations.1.timestamp"][0]


@pytest.mark.parametrize(
    ("field", "expression", "missing", "position", "form"),
    [
        ("transform", "HASH:MURMUR64,/actor/login,h", "error", 0, "HASH:MURMUR64,/actor/login,h"),
        ("transform", "TRY:HASH:murmur128,/id,null", "error", 4, "HASH:murmur128,/id"),
        ("key_transform", "HASH:MURMUR128,/id", "error", 0, "HASH:MURMUR128,/id"),
        ("transform", "CACHE_LOOKUP:/actor/id,users,MERGE", "error", 0, "CACHE_LOOKUP:/actor/id,users,MERGE"),
        ("transform", "CACHE_PUT:/actor/id,users", "error", 0, "CACHE_PUT:/actor/id,users"),
    ],
)
def test_low_latency_refuses_a_form_that_needs_a_python_udf_at_its_field_and_position(
    field, expression, missing, position, form
):
    data = _low_latency(github_spec())
    data["destinations"][1][field] = expression
    data["error_handling"] = {"missing_field_behavior": missing}
    errors = _errors(data)
    assert list(errors) == [f"destinations.1.{field}"]
    (message,) = errors[f"destinations.1.{field}"]
    assert message.startswith(f"at {position}: {form} needs a Python UDF"), message
    assert "low_latency" in message


@pytest.mark.parametrize(
    ("expression", "missing"),
    [
        ("HASH:SHA256,/actor/login,h", "error"),  # a built-in digest
        ("STRING:REGEX_REPLACE,/type,a*,-", "error"),
        ("STRING:REGEX_REPLACE,/type,a+,-", "passthrough"),
        ("TRY:STRING:REGEX_REPLACE,/type,a*,-,null", "null"),
        # Review #28 finding 1: the regex forms run in the JVM on RE2/J (a Java UDF, no Python worker), so a
        # pattern that can match empty in passthrough mode no longer needs the Python fallback.
        ("STRING:REGEX_REPLACE,/type,a*,-", "passthrough"),
    ],
)
def test_low_latency_accepts_the_forms_spark_compiles_to_built_in_functions(expression, missing):
    data = _low_latency(github_spec())
    data["destinations"][0]["transform"] = expression
    data["error_handling"] = {"missing_field_behavior": missing}
    assert parse_spec(data, pipeline_name="demo").destinations[0].transform == expression


def test_record_formats_default_to_json_and_a_registry_destination_to_its_topics_subject():
    data = github_spec()
    spec = parse_spec(data, pipeline_name="demo")
    assert spec.source.format == "json"
    assert not spec.source.uses_registry
    assert {(d.format, d.subject) for d in spec.destinations} == {("json", None)}

    data["source"]["format"] = "avro"
    data["destinations"][0]["format"] = "protobuf"
    data["destinations"][1]["format"] = "json_schema"
    data["destinations"][1]["subject"] = "shared-pushes"
    spec = parse_spec(data, pipeline_name="demo")
    assert spec.source.uses_registry
    first, second = spec.destinations[0], spec.destinations[1]
    assert (first.format, first.subject) == ("protobuf", f"{first.topic}-value")
    assert (second.format, second.subject) == ("json_schema", "shared-pushes")
    assert parse_spec(spec.to_json(), pipeline_name="demo") == spec


def test_an_unknown_format_or_a_subject_without_a_registry_format_is_refused_at_its_field():
    data = github_spec()
    data["source"]["format"] = "xml"
    data["destinations"][0]["subject"] = "x-value"
    data["destinations"][1]["format"] = "avro"
    data["destinations"][1]["subject"] = " "
    with pytest.raises(SpecError) as caught:
        parse_spec(data, pipeline_name="demo")
    errors = caught.value.errors
    assert "must be one of" in errors["source.format"][0]
    assert "only a destination with a registry format" in errors["destinations.0.subject"][0]
    assert "1 to 255 characters" in errors["destinations.1.subject"][0]


def test_low_latency_refuses_registry_formats_which_need_a_python_worker():
    data = _low_latency(github_spec())
    data["source"]["format"] = "avro"
    data["destinations"][0]["format"] = "avro"
    with pytest.raises(SpecError) as caught:
        parse_spec(data, pipeline_name="demo")
    assert "Python worker" in caught.value.errors["source.format"][0]
    assert "Python worker" in caught.value.errors["destinations.0.format"][0]
