'use strict';
/*
 * gRPC's Node.js xDS client (@grpc/grpc-js-xds), driven line by line over stdin by
 * tests/integration/test_node_xds_client.py.
 *
 * Usage: GRPC_XDS_BOOTSTRAP=FILE node xds_client.js TARGET METHOD
 *
 * It opens one channel to xds:///TARGET and prints READY. Then every line read from stdin is
 * a command, answered by one JSON line on stdout:
 *
 *   calls N          N unary RPCs (CONCURRENCY in flight), then a summary;
 *   burst SECONDS    prints BURSTING, makes RPCs for SECONDS, then a summary;
 *   quit             closes the channel and exits 0 (so does the end of input).
 *
 * A summary is {"calls": n, "failed": n, "errors": {"CODE details": count},
 * "replies": {"<reply>": {"count": n, "first": ms, "last": ms}}}: every reply body the
 * backends sent, with the wall-clock times (milliseconds since the epoch) at which the first
 * and the last RPC answered with it completed. Requests are empty; replies are raw bytes.
 * The client's own log goes to stderr (GRPC_TRACE=xds_client,xds_resolver GRPC_VERBOSITY=DEBUG).
 */

const readline = require('node:readline');
const { performance } = require('node:perf_hooks');
const grpc = require('@grpc/grpc-js');
const grpcXds = require('@grpc/grpc-js-xds');

const CONCURRENCY = 8;
const RPC_TIMEOUT_MS = 5000;

function now() {
  return performance.timeOrigin + performance.now();
}

function identity(buffer) {
  return buffer;
}

class Summary {
  constructor() {
    this.calls = 0;
    this.failed = 0;
    this.errors = {};
    this.replies = {};
  }

  record(error, reply) {
    this.calls += 1;
    if (error) {
      this.failed += 1;
      const key = `${grpc.status[error.code] ?? error.code} ${error.details}`;
      this.errors[key] = (this.errors[key] ?? 0) + 1;
      return;
    }
    const at = now();
    const entry = this.replies[reply] ?? { count: 0, first: at, last: at };
    entry.count += 1;
    entry.last = at;
    this.replies[reply] = entry;
  }
}

function rpc(client, method) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + RPC_TIMEOUT_MS);
    client.makeUnaryRequest(method, identity, identity, Buffer.alloc(0), { deadline },
      (error, reply) => resolve([error, error ? null : reply.toString()]));
  });
}

/** Run CONCURRENCY loops of RPCs while more() says so; one summary for all of them. */
async function run(client, method, more) {
  const summary = new Summary();
  const loop = async () => {
    while (more(summary)) {
      const [error, reply] = await rpc(client, method);
      summary.record(error, reply);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, loop));
  return summary;
}

async function calls(client, method, count) {
  let started = 0;
  return run(client, method, () => {
    started += 1;
    return started <= count;
  });
}

async function burst(client, method, seconds) {
  const end = now() + seconds * 1000;
  return run(client, method, () => now() < end);
}

function say(line) {
  process.stdout.write(`${line}\n`);
}

async function main() {
  const [target, method] = process.argv.slice(2);
  grpcXds.register();
  const client = new grpc.Client(`xds:///${target}`, grpc.credentials.createInsecure());
  say('READY');
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const raw of lines) {
    const [command, argument] = raw.trim().split(/\s+/);
    if (command === 'quit') {
      break;
    } else if (command === 'calls') {
      say(JSON.stringify(await calls(client, method, Number(argument))));
    } else if (command === 'burst') {
      say('BURSTING');
      say(JSON.stringify(await burst(client, method, Number(argument))));
    } else {
      say(JSON.stringify({ unknown: raw }));
    }
  }
  client.close();
  // The xDS client's stream would keep the event loop alive.
  process.exit(0);
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exit(1);
});
