// N lock cycles against the sidecar at URL through Node's fetch (undici), acquire and release.
//   node cycle.mjs URL N
const [url, cycles] = [process.argv[2], Number(process.argv[3])];
for (let n = 0; n < cycles; n++) {
  const granted = await fetch(`${url}/v1/locks/node-${n}/acquire`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ owner: "bench", auto_renew: false }),
  });
  const { lease_id: lease } = await granted.json();
  const released = await fetch(`${url}/v1/leases/${lease}`, { method: "DELETE" });
  await released.arrayBuffer();
  if (released.status !== 200) throw new Error(`release: ${released.status}`);
}
