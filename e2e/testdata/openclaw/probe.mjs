// Run in the OpenClaw gateway's session, by its Node, just before the
// gateway (same sandbox, same identity): what the gateway itself could
// do. Prints one JSON object: each attempt's outcome.
//   node probe.mjs CANARY ALLOWED_URL DENIED_URL DIRECT_HOST:PORT
import fs from "node:fs";
import net from "node:net";

const [canary, allowedURL, deniedURL, direct] = process.argv.slice(2);
const out = {};
try {
  out.canary = "read:" + fs.readFileSync(canary, "utf8");
} catch (e) {
  out.canary = "denied:" + e.code;
}
for (const [k, url] of [["allowed", allowedURL], ["denied", deniedURL]]) {
  try {
    const r = await fetch(url, { signal: AbortSignal.timeout(10000) });
    out[k] = r.status + ":" + (await r.text()).slice(0, 200);
  } catch (e) {
    // Node's fetch tunnels through the proxy with CONNECT: a refusal
    // is the cause "Proxy response (403) !== 200 ...".
    out[k] = "error:" + (e.cause?.message || e.cause?.code || e.message);
  }
}
const [host, port] = direct.split(":");
out.direct = await new Promise((resolve) => {
  const s = net.connect({ host, port: Number(port), timeout: 3000 });
  s.on("connect", () => { s.destroy(); resolve("connected"); });
  s.on("error", (e) => resolve("error:" + e.code));
  s.on("timeout", () => { s.destroy(); resolve("error:timeout"); });
});
console.log(JSON.stringify(out));
