"""The client's address (app/client_address.py): the peer's, unless a setting says a trusted proxy forwards it.

Any client can send an ``X-Forwarded-For`` header: it counts only behind a proxy the operator trusts
(``PANDA_TRUSTED_PROXY``), and then only its last entry (the one the proxy appended) does.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from app import client_address as ca


class Headers:
    """A stand-in for ``st.context.headers``: repeated keys, case-insensitive, ``get_all``."""

    def __init__(self, *pairs: tuple[str, str]) -> None:
        self.pairs = list(pairs)

    def get_all(self, key: str) -> list[str]:
        return [v for k, v in self.pairs if k.lower() == key.lower()]

    def get(self, key: str, default=None):
        found = self.get_all(key)
        return found[-1] if found else default


def _context(ip: str | None, *pairs: tuple[str, str]) -> SimpleNamespace:
    return SimpleNamespace(ip_address=ip, headers=Headers(*pairs))


@pytest.fixture
def untrusted(monkeypatch):
    monkeypatch.delenv(ca.TRUSTED_PROXY_ENV, raising=False)


@pytest.fixture
def trusted(monkeypatch):
    monkeypatch.setenv(ca.TRUSTED_PROXY_ENV, "1")


def test_the_peer_address_without_a_trusted_proxy(untrusted):
    assert ca.client_address(_context("203.0.113.7")) == "203.0.113.7"
    # A forged header changes nothing: the server is not behind a proxy it trusts.
    assert ca.client_address(_context("203.0.113.7", ("X-Forwarded-For", "198.51.100.1"))) == "203.0.113.7"
    assert ca.client_address(_context(None, ("X-Forwarded-For", "198.51.100.1"))) is None
    assert ca.client_address(_context("2001:db8::1")) == "2001:db8::1"


def test_behind_a_trusted_proxy_the_last_forwarded_address_counts(trusted):
    # The proxy appends the address it saw: what the client wrote before it is not believed.
    forged = _context("10.0.0.2", ("X-Forwarded-For", "198.51.100.1, 192.0.2.44"))
    assert ca.client_address(forged) == "192.0.2.44"
    # A client's own header line, then the proxy's own line: the last line's last entry.
    two_lines = _context(None, ("X-Forwarded-For", "198.51.100.1"), ("x-forwarded-for", "192.0.2.45"))
    assert ca.client_address(two_lines) == "192.0.2.45"
    assert ca.client_address(_context(None, ("X-Forwarded-For", "[2001:db8::5]:4711"))) == "2001:db8::5"
    assert ca.client_address(_context(None, ("X-Forwarded-For", "192.0.2.46:4711"))) == "192.0.2.46"
    # No header, or one that is not an address: the peer's address.
    assert ca.client_address(_context("10.0.0.2")) == "10.0.0.2"
    assert ca.client_address(_context("10.0.0.2", ("X-Forwarded-For", "<script>"))) == "10.0.0.2"
    assert ca.client_address(_context(None, ("X-Forwarded-For", "unknown"))) is None


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off"])
def test_the_setting_is_off_unless_it_says_yes(monkeypatch, value):
    monkeypatch.setenv(ca.TRUSTED_PROXY_ENV, value)
    assert not ca.behind_trusted_proxy()
    assert ca.client_address(_context("203.0.113.7", ("X-Forwarded-For", "198.51.100.1"))) == "203.0.113.7"


def test_an_unreadable_context_is_no_address(untrusted):
    assert ca.client_address(SimpleNamespace()) is None
    assert ca.client_address(_context("not an address")) is None

    class Broken:
        @property
        def ip_address(self):
            raise RuntimeError("no session")

    assert ca.client_address(Broken()) is None


def test_an_ipv6_client_is_counted_by_its_network():
    # One phone can take any address of its /64: the limit counts the /64, and an IPv4 address as itself.
    assert ca.address_group("2001:db8:1:2::1") == ca.address_group("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert ca.address_group("2001:db8:1:3::1") != ca.address_group("2001:db8:1:2::1")
    assert ca.address_group("192.0.2.1") == "192.0.2.1"
    assert ca.address_group("::ffff:192.0.2.1") == "192.0.2.1"
    assert ca.address_group("192.0.2.1") != ca.address_group("192.0.2.2")


def test_outside_streamlit_there_is_no_address(untrusted):
    assert ca.client_address() is None  # no session: no address, no error
