"""N lock cycles against the sidecar at URL through Python's httpx or requests, one
keep-alive connection: acquire and release; with `requests-keepalive`, a keepalive and a read
of the lease between them (what an app without an event stream sends while it holds one).

    python cycle.py httpx|requests|requests-keepalive URL N
"""

import sys


def main() -> None:
    kind, url, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "httpx":
        import httpx

        session = httpx.Client()
    else:
        import requests

        session = requests.Session()
    body = {"owner": "bench", "auto_renew": False}
    for n in range(cycles):
        granted = session.post(f"{url}/v1/locks/{kind}-{n}/acquire", json=body)
        lease = f"{url}/v1/leases/{granted.json()['lease_id']}"
        if kind == "requests-keepalive":
            assert session.post(f"{lease}/keepalive").status_code == 200
            assert session.get(lease).status_code == 200
        assert session.delete(lease).status_code == 200


main()
