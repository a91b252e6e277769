"""Duration and size literals."""

import pytest

from aviso_plugins._shared.literals import parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("30m", 1800),
        ("12h", 43200),
        ("7d", 604800),
        ("2w", 1209600),
        ("90M", 5400),
        (" 7d ", 604800),
        ("0s", 0),
        ("7D", 604800),
    ],
)
def test_duration_accepted(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10",
        "1.5h",
        "10 m",
        "7dd",
        "10x",
        "-1h",
        "+1h",
        "h",
        "1h30m",
        "١٠s",
        f"{2**64}s",
        f"{2**64 // 60 + 1}m",
    ],
)
def test_duration_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("100K", 100_000),
        ("100Ki", 102_400),
        ("512Mi", 512 * 2**20),
        ("2G", 2_000_000_000),
        ("1T", 10**12),
        ("1Ti", 2**40),
        (" 4Gi ", 4 * 2**30),
    ],
)
def test_size_accepted(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "1024",
        "0Mi",
        "10m",
        "1k",
        "1KB",
        "1.5G",
        "10 Gi",
        "B",
        "",
        "-1K",
        "+1K",
        f"{2**63}K",
        "9000000Ti",
    ],
)
def test_size_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)
