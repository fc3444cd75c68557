// An exchange-style market-data feed over WebSocket, written with the `ws` package, for
// msgbench's feed tests and examples (a server msgbench did not write).
//
//   node feeds/node/feed.js --port 9443 --rate 50000 [--format json|binary] [--skip-every N] [--for SECONDS]
//                           [--clock-ahead MS]
//                           [--cert cert.pem --key key.pem]   (wss://)
//
// After a client's first message (any subscription) it streams trades to it, at --rate or at
// the rate its URL asks for (ws://127.0.0.1:9443/?rate=50000):
//   json:   {"e":"trade","E":<unix ms>,"s":"BTCUSDT","t":<trade id>,"p":"97012.5","q":"0.01"}
//           plus, every 100th message, a {"e":"depthUpdate",...} a filter must skip;
//   binary: 24 bytes: trade id (u64 LE), unix µs (u64 LE), price in cents (u64 LE).
// It answers the subscription with {"result":null,"id":<id>} (json). Trade ids count from
// 1000 on each connection; with --skip-every N, every id that is a multiple of N is skipped
// (never sent): the gaps a client must count. With --clock-ahead MS every stamp is MS later than
// the time it was made, as from a host whose clock runs ahead. Messages go out in batches every millisecond
// on an absolute schedule, so the rate holds on average.
'use strict';
const { WebSocketServer } = require('ws');

const USAGE = 'usage: node feed.js --port N --rate PER_SEC [--format json|binary] [--skip-every N] [--for S] [--clock-ahead MS] [--cert cert.pem --key key.pem]';
const KNOWN = ['port', 'rate', 'format', 'skip-every', 'for', 'clock-ahead', 'cert', 'key'];
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(USAGE);
  process.exit(0);
}
// Every flag takes a value; anything else is a mistake to name, not to serve past.
for (let i = 2; i < process.argv.length; i += 2) {
  const flag = process.argv[i];
  if (!flag.startsWith('--') || !KNOWN.includes(flag.slice(2)) || i + 1 >= process.argv.length) {
    console.error(`feed.js: ${i + 1 >= process.argv.length && flag.startsWith('--') ? `${flag} needs a value` : `unknown argument ${flag}`}\n${USAGE}`);
    process.exit(2);
  }
}

function arg(name, fallback) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : fallback;
}
const port = Number(arg('port', 9443));
const defaultRate = Number(arg('rate', 10000));
const format = arg('format', 'json');
const skipEvery = Number(arg('skip-every', 0));
const runFor = Number(arg('for', 0));
const aheadMs = Number(arg('clock-ahead', 0));
if (!(defaultRate > 0) || !['json', 'binary'].includes(format) || !(port >= 0) || !(aheadMs >= 0)) {
  console.error(USAGE);
  process.exit(2);
}

// With --cert and --key (PEM files), the feed is wss:// (TLS), as most real feeds are.
const cert = arg('cert', '');
const key = arg('key', '');
let wss;
if (cert && key) {
  const fs = require('fs');
  const server = require('https').createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) });
  wss = new WebSocketServer({ server, maxPayload: 64 * 1024 });
  server.listen(port, '127.0.0.1', () => console.log(`node feed listening on wss://127.0.0.1:${port}/ (${defaultRate}/s ${format})`));
} else {
  wss = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 64 * 1024 });
  wss.on('listening', () => console.log(`node feed listening on ws://127.0.0.1:${wss.address().port}/ (${defaultRate}/s ${format})`));
}
wss.on('connection', (ws, req) => {
  // A client may ask for its own rate: ws://host:port/?rate=50000 (a sweep's axis).
  const asked = Number(new URL(req.url, 'ws://x').searchParams.get('rate'));
  const rate = asked > 0 && asked <= 1e6 ? asked : defaultRate;
  let next = 1000;
  let timer = null;
  let started = 0;
  let sent = 0;
  ws.on('error', () => {});
  ws.on('message', (data) => {
    if (timer) return;
    if (format === 'json') {
      let id = 1;
      try { id = JSON.parse(data.toString()).id ?? 1; } catch (_) {}
      ws.send(JSON.stringify({ result: null, id }));
    }
    started = Date.now();
    timer = setInterval(tick, 1);
  });
  ws.on('close', () => clearInterval(timer));

  function tick() {
    // Messages due by now on the absolute schedule, whatever the timer's jitter.
    const due = Math.floor(((Date.now() - started) * rate) / 1000);
    if (ws.bufferedAmount > 8 << 20) return; // a client that does not read: wait, bounded
    for (; sent < due; sent++) {
      let id = next++;
      if (skipEvery > 0 && id % skipEvery === 0) id = next++;
      if (format === 'json') {
        ws.send(`{"e":"trade","E":${Date.now() + aheadMs},"s":"BTCUSDT","t":${id},"p":"97012.5","q":"0.01"}`);
        if (sent % 100 === 99) ws.send(`{"e":"depthUpdate","E":${Date.now()},"s":"BTCUSDT","u":${id}}`);
      } else {
        const b = Buffer.allocUnsafe(24);
        b.writeBigUInt64LE(BigInt(id), 0);
        b.writeBigUInt64LE(BigInt(Math.round((performance.timeOrigin + performance.now() + aheadMs) * 1000)), 8);
        b.writeBigUInt64LE(9701250n, 16);
        ws.send(b);
      }
    }
  }
});
if (runFor > 0) setTimeout(() => process.exit(0), runFor * 1000);
process.on('SIGTERM', () => process.exit(0));
