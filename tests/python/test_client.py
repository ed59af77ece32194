"""The sidecar through a Python client generated from docs/openapi.json.

tests/it/python/client.rs generates the client (openapi-python-client, into a temp dir),
starts a sidecar with a bearer token on real masters and runs this file with pytest, giving
REDLEASE_URL (the sidecar's base URL), REDLEASE_TOKEN and REDLEASE_CLIENT_PATH (the directory
holding the generated package ``redlease_api``). The event stream is read with httpx, the HTTP
client the generated code is built on: the generated client does not speak Server-Sent Events.
"""

import json
import os
import sys

import httpx

sys.path.insert(0, os.environ["REDLEASE_CLIENT_PATH"])

from redlease_api import AuthenticatedClient  # noqa: E402
from redlease_api.api.elections import campaign, proclaim_lease, show_election  # noqa: E402
from redlease_api.api.leases import acquire_lock, get_lease, release_lease, renew_lease  # noqa: E402
from redlease_api.models import AcquireBody, CampaignBody, ElectionState  # noqa: E402
from redlease_api.models import LeaseEndReason, LeaseState, ProclaimBody, RenewBody  # noqa: E402

BASE_URL = os.environ["REDLEASE_URL"]
TOKEN = os.environ["REDLEASE_TOKEN"]
RESOURCE = "py-client-job"


def client() -> AuthenticatedClient:
    """A client of the sidecar that sends the bearer token, with a bounded timeout."""
    return AuthenticatedClient(base_url=BASE_URL, token=TOKEN, timeout=httpx.Timeout(10.0))


def first_event(lease_id: str, timeout: float = 5.0) -> tuple[str, dict]:
    """The first event of the lease's stream: its name and its lease, read within ``timeout``."""
    url = f"{BASE_URL}/v1/leases/{lease_id}/events"
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
    name = None
    with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:") and name is not None:
                return name, json.loads(line.removeprefix("data:"))
    raise AssertionError("the stream ended before its first event")


def test_take_renew_watch_and_release_a_lock():
    """Acquire, renew, the first event, a second owner refused, release, read released."""
    with client() as sidecar:
        taken = acquire_lock.sync_detailed(
            RESOURCE, client=sidecar, body=AcquireBody(owner="py-a", ttl_ms=2000)
        )
        assert taken.status_code == 200, taken.content
        lease = taken.parsed
        assert lease.acquired and lease.owner == "py-a" and lease.resource == RESOURCE
        assert lease.state == LeaseState.HELD and lease.fencing_token >= 1
        assert len(lease.lease_id) == 32

        renewed = renew_lease.sync_detailed(
            lease.lease_id, client=sidecar, body=RenewBody(ttl_ms=1000)
        )
        assert renewed.status_code == 200, renewed.content
        assert renewed.parsed.ttl_ms == 1000 and renewed.parsed.lease_id == lease.lease_id
        # Without a body (it is optional), the lease keeps its TTL.
        kept = renew_lease.sync_detailed(lease.lease_id, client=sidecar)
        assert kept.status_code == 200, kept.content
        assert kept.parsed.ttl_ms == 1000

        # The sidecar renews the lease by itself (every few hundred ms at a 1 s TTL).
        name, event = first_event(lease.lease_id)
        assert name == "renewed", (name, event)
        assert event["lease_id"] == lease.lease_id and event["state"] == "held"

        refused = acquire_lock.sync_detailed(
            RESOURCE, client=sidecar, body=AcquireBody(owner="py-b")
        )
        assert refused.status_code == 409, refused.content
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.parsed.reason == "held" and refused.parsed.acquired is False

        released = release_lease.sync_detailed(lease.lease_id, client=sidecar)
        assert released.status_code == 200, released.content
        assert released.parsed.released is True
        assert released.parsed.state == LeaseState.RELEASED

        read = get_lease.sync_detailed(lease.lease_id, client=sidecar)
        assert read.status_code == 200, read.content
        assert read.parsed.state == LeaseState.RELEASED
        assert read.parsed.reason == LeaseEndReason.RELEASED


def test_campaign_proclaim_read_and_resign():
    """A campaign's lease has its term and value; a rival is refused; a proclamation keeps the
    term; the leader read follows; after the resignation the election is vacant."""
    with client() as sidecar:
        won = campaign.sync_detailed(
            "py-election", client=sidecar, body=CampaignBody(owner="py-a", value="10.0.0.1:80")
        )
        assert won.status_code == 200, won.content
        leader = won.parsed
        assert leader.term == leader.fencing_token and leader.value == "10.0.0.1:80"

        rival = campaign.sync_detailed(
            "py-election", client=sidecar, body=CampaignBody(owner="py-b", value="x")
        )
        assert rival.status_code == 409 and rival.parsed.reason == "held", rival.content

        proclaimed = proclaim_lease.sync_detailed(
            leader.lease_id, client=sidecar, body=ProclaimBody(value="10.0.0.1:81")
        )
        assert proclaimed.status_code == 200, proclaimed.content
        assert proclaimed.parsed.term == leader.term
        assert proclaimed.parsed.value == "10.0.0.1:81"

        read = show_election.sync_detailed("py-election", client=sidecar)
        assert read.status_code == 200, read.content
        assert read.parsed.state == ElectionState.LEADER
        assert read.parsed.term == leader.term and read.parsed.value == "10.0.0.1:81"
        assert read.parsed.owner == "py-a" and read.parsed.lease_id == leader.lease_id

        resigned = release_lease.sync_detailed(leader.lease_id, client=sidecar)
        assert resigned.status_code == 200 and resigned.parsed.released is True
        vacant = show_election.sync_detailed("py-election", client=sidecar)
        assert vacant.parsed.state == ElectionState.VACANT, vacant.content
