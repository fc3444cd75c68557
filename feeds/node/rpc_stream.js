// A JSON-RPC 2.0 server over WebSocket (Node's `ws`) whose every call is answered by a stream,
// for msgbench's tests of streamed `ws-rpc` answers from a server it did not write:
//
//   node feeds/node/rpc_stream.js --port 9446 [--messages 5] [--every-ms 10] [--break error|close] [--break-every N]
//
// Each call (`{"jsonrpc":"2.0","method":…,"id":n}`) gets --messages responses
// `{"jsonrpc":"2.0","id":n,"result":{"k":k}}`, --every-ms apart (the first at once), then
// `{"jsonrpc":"2.0","id":n,"result":"[DONE]"}`. With --break, every --break-every-th call (the
// 1st, the N+1st, …) is broken after 2 messages: `error` answers it with a JSON-RPC error,
// `close` closes the connection (every stream on it cut).
'use strict';
const { WebSocketServer } = require('ws');

const USAGE = 'usage: node rpc_stream.js --port N [--messages N] [--every-ms MS] [--break error|close] [--break-every N]';
const KNOWN = ['port', 'messages', 'every-ms', 'break', 'break-every'];
for (let i = 2; i < process.argv.length; i += 2) {
  const flag = process.argv[i];
  if (!flag.startsWith('--') || !KNOWN.includes(flag.slice(2)) || i + 1 >= process.argv.length) {
    console.error(`rpc_stream.js: unknown or incomplete argument ${flag}\n${USAGE}`);
    process.exit(2);
  }
}
function arg(name, fallback) {
  const i = process.argv.indexOf('--' + name);
  return i >= 0 ? process.argv[i + 1] : fallback;
}
const port = Number(arg('port', 9446));
const messages = Number(arg('messages', 5));
const everyMs = Number(arg('every-ms', 10));
const breakHow = arg('break', '');
const breakEvery = Number(arg('break-every', 10));
let calls = 0;

const server = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 1 << 20 });
server.on('connection', (ws) => {
  ws.on('message', (data) => {
    let id;
    try {
      id = JSON.parse(data).id;
    } catch {
      ws.send('{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}');
      return;
    }
    const broken = breakHow && calls++ % breakEvery === 0;
    let k = 0;
    const next = () => {
      if (ws.readyState !== ws.OPEN) return;
      if (broken && k === 2) {
        if (breakHow === 'close') ws.close();
        else ws.send(JSON.stringify({ jsonrpc: '2.0', id, error: { code: -32000, message: 'model overloaded' } }));
        return;
      }
      if (k < messages) {
        ws.send(JSON.stringify({ jsonrpc: '2.0', id, result: { k } }));
        k++;
        setTimeout(next, everyMs);
      } else {
        ws.send(JSON.stringify({ jsonrpc: '2.0', id, result: '[DONE]' }));
      }
    };
    next();
  });
});
server.on('listening', () => console.log(`node rpc stream server on ws://127.0.0.1:${server.address().port}/`));
process.on('SIGTERM', () => process.exit(0));
