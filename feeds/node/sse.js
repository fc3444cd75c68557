// A Server-Sent Events feed (text/event-stream) written with Node's own http, https and http2
// modules, for msgbench's event-stream tests and examples (a server msgbench did not write).
//
//   node feeds/node/sse.js --port 9445 --rate 2000 [--skip-every N] [--for SECONDS]
//                          [--replay yes] [--cut CLIENT:N] [--retry MS] [--http2 yes] [--text yes]
//                          [--cert cert.pem --key key.pem]   (https://)
//
// One feed for every client: event n is due at start + n/rate (an absolute schedule) and says
//   id: n
//   event: tick
//   data: {"seq":n,"ts":<unix µs of its due time>,"sym":"BTCUSDT","px":97012.5}
// (with --text yes the data is only the stamp: `data: <unix µs>`)
// and every 100th event is followed by an `event: status` one a filter must skip; a comment
// line (": hb") goes out every second. A client starts at the event due when it connects. With
// --replay yes, a request with Last-Event-ID: k starts at k + 1 instead (what it missed is sent
// at once, with its own stamps); without it, a reconnected client misses what fell due while it
// was away. With --skip-every N, every event whose number is a multiple of N is never sent.
// With --cut CLIENT:N, the first connection whose msgbench-client header is CLIENT is ended after
// N events (the chunked body's last chunk: a clean end). A client that does not read holds at
// most 8 MiB in the server; then its events wait (it falls behind, nothing is skipped).
// A request for /stream?messages=N&first_ms=F&every_ms=E (any method; its body is not read) is
// answered by a stream of its own, as an LLM's completion is: message k (k = 0 … N-1) due F + k·E
// ms after the request came (`data: {"k":k}`), then `data: [DONE]` and the body's end (defaults
// N = 20, F = 50, E = 10; at most 10000 messages, at most 60 s apart).
// stdout: one line per request, "request <client> last-event-id=<id or ->".
'use strict';
const http = require('http');
const fs = require('fs');

const USAGE = 'usage: node sse.js --port N --rate PER_SEC [--skip-every N] [--for S] [--replay yes] [--cut CLIENT:N] [--retry MS] [--http2 yes] [--text yes] [--cert cert.pem --key key.pem]';
const KNOWN = ['port', 'rate', 'skip-every', 'for', 'replay', 'cut', 'retry', 'http2', 'cert', 'key', 'text'];
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  console.log(USAGE);
  process.exit(0);
}
for (let i = 2; i < process.argv.length; i += 2) {
  const flag = process.argv[i];
  if (!flag.startsWith('--') || !KNOWN.includes(flag.slice(2)) || i + 1 >= process.argv.length) {
    console.error(`sse.js: ${i + 1 >= process.argv.length && flag.startsWith('--') ? `${flag} needs a value` : `unknown argument ${flag}`}\n${USAGE}`);
    process.exit(2);
  }
}
function arg(name, fallback) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : fallback;
}
const port = Number(arg('port', 9445));
const rate = Number(arg('rate', 2000));
const skipEvery = Number(arg('skip-every', 0));
const runFor = Number(arg('for', 0));
const replay = arg('replay', 'no') === 'yes';
const retry = Number(arg('retry', 100));
const [cutClient, cutAfter] = (arg('cut', ':0')).split(':');
const useHttp2 = arg('http2', 'no') === 'yes';
const textData = arg('text', 'no') === 'yes';
const cert = arg('cert', '');
const key = arg('key', '');
if (!(rate > 0 && rate <= 1e6) || !(port >= 0) || !(retry >= 0)) {
  console.error(USAGE);
  process.exit(2);
}

const startMs = performance.timeOrigin + performance.now();
const dueUs = (n) => Math.round((startMs + (n * 1000) / rate) * 1000);
const dueNow = () => Math.floor(((performance.timeOrigin + performance.now() - startMs) * rate) / 1000);
let cutDone = false;
const clients = new Set();

function event(n) {
  const data = textData ? `${dueUs(n)}` : `{"seq":${n},"ts":${dueUs(n)},"sym":"BTCUSDT","px":97012.5}`;
  let text = `id: ${n}\nevent: tick\ndata: ${data}\n\n`;
  if (n % 100 === 99) text += `event: status\ndata: {"ok":true,"at":${n}}\n\n`;
  return text;
}

function onStream(req, res) {
  const q = new URL(req.url, 'http://x').searchParams;
  const num = (name, fallback, max) => {
    const v = Number(q.get(name) ?? fallback);
    return Number.isFinite(v) && v >= 0 && v <= max ? v : fallback;
  };
  const messages = num('messages', 20, 10000);
  const firstMs = num('first_ms', 50, 60000);
  const everyMs = num('every_ms', 10, 60000);
  const t0 = performance.now();
  req.resume();
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  let k = 0;
  let timer = null;
  const next = () => {
    if (res.destroyed) return;
    while (k < messages && performance.now() - t0 >= firstMs + k * everyMs) {
      res.write(`data: {"k":${k}}\n\n`);
      k++;
    }
    if (k >= messages) {
      res.end('data: [DONE]\n\n');
      return;
    }
    timer = setTimeout(next, Math.max(0, t0 + firstMs + k * everyMs - performance.now()));
  };
  timer = setTimeout(next, firstMs);
  res.on('close', () => clearTimeout(timer));
}

function onRequest(req, res) {
  if (req.url.startsWith('/stream')) {
    onStream(req, res);
    return;
  }
  const client = String(req.headers['msgbench-client'] || '-');
  const last = req.headers['last-event-id'];
  console.log(`request ${client} last-event-id=${last ?? '-'}`);
  if (!String(req.headers.accept || '').includes('text/event-stream')) {
    res.writeHead(406, { 'content-type': 'text/plain' });
    res.end('ask for text/event-stream\n');
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.write(`retry: ${retry}\n\n`);
  const resumeAt = replay && last !== undefined && /^\d+$/.test(last) ? Number(last) + 1 : null;
  const c = { res, next: resumeAt ?? dueNow(), sent: 0, cutAt: 0 };
  if (!cutDone && client === cutClient) {
    cutDone = true;
    c.cutAt = Number(cutAfter);
  }
  clients.add(c);
  const gone = () => clients.delete(c);
  res.on('close', gone);
  res.on('error', gone);
}

function pump() {
  const due = dueNow();
  for (const c of clients) {
    let text = '';
    while (c.next <= due && c.res.writableLength + text.length < 8 << 20) {
      const n = c.next++;
      if (skipEvery > 0 && n % skipEvery === 0) continue;
      text += event(n);
      c.sent++;
      if (c.cutAt > 0 && c.sent >= c.cutAt) break;
    }
    if (text) c.res.write(text);
    if (c.cutAt > 0 && c.sent >= c.cutAt) {
      clients.delete(c);
      c.res.end();
    }
  }
}
setInterval(pump, 1);
setInterval(() => { for (const c of clients) c.res.write(': hb\n\n'); }, 1000);

let server;
const tls = cert && key ? { cert: fs.readFileSync(cert), key: fs.readFileSync(key) } : null;
if (useHttp2) {
  const http2 = require('http2');
  server = tls ? http2.createSecureServer({ ...tls, allowHTTP1: true }, onRequest) : http2.createServer(onRequest);
} else {
  server = tls ? require('https').createServer(tls, onRequest) : http.createServer(onRequest);
}
server.listen(port, '127.0.0.1', () => {
  const scheme = tls ? 'https' : 'http';
  console.log(`node sse feed listening on ${scheme}://127.0.0.1:${server.address().port}/events (${rate}/s${useHttp2 ? ', HTTP/2' : ''})`);
});
if (runFor > 0) setTimeout(() => process.exit(0), runFor * 1000);
process.on('SIGTERM', () => process.exit(0));
