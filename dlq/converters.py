"""URL path converters for Kafka coordinates, registered once on import by the URL modules that use them:
``<partition:p>`` (a Kafka partition: a non-negative 32-bit signed integer, Kafka's ``int32`` partition
field) and ``<offset:o>`` (a Kafka offset: a non-negative 64-bit signed integer, Kafka's ``int64``).

Django's ``<int:...>`` takes any run of digits, and a partition past 2**31 - 1 or an offset past 2**63 - 1
reached the Kafka client as an OverflowError (a 500). A value out of range does not match the URL at all:
a 404, like any other address that names nothing.
"""

from __future__ import annotations

from django.urls import register_converter


class _BoundedInt:
    """Digits that fit ``maximum``; a longer or larger value is no match (Django's ValueError contract)."""

    maximum = 0
    regex = "[0-9]+"

    def to_python(self, value: str) -> int:
        """The integer, or ValueError (no match) past ``maximum`` or longer than it can be written."""
        if len(value) > len(str(self.maximum)) or int(value) > self.maximum:
            raise ValueError(f"{value[:30]} is out of range")
        return int(value)

    def to_url(self, value: int) -> str:
        """The integer as digits."""
        return str(value)


class PartitionConverter(_BoundedInt):
    """A Kafka partition number: 0 to 2**31 - 1."""

    maximum = 2**31 - 1
    regex = "[0-9]{1,10}"


class OffsetConverter(_BoundedInt):
    """A Kafka offset: 0 to 2**63 - 1."""

    maximum = 2**63 - 1
    regex = "[0-9]{1,19}"


register_converter(PartitionConverter, "partition")
register_converter(OffsetConverter, "offset")
