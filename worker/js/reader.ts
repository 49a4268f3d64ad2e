/**
 * The reader thread: fd_in is read at all times, even while a tool busy-loops on
 * the main thread (which then sees nothing), so that the end of the stream, or
 * garbage on it, takes the lifeline at once. It reads with blocking reads (the
 * fd is the host's pipe, left blocking), decodes frames, checks each message's
 * envelope and posts the messages, in order, to the main thread.
 */
import * as fs from "node:fs";
import { parentPort, workerData } from "node:worker_threads";
import { FrameDecoder, type Message, ProtocolError } from "./frames.ts";
import { lifeline } from "./lifeline.ts";

interface ReaderData {
  fdIn: number;
  killFd: number;
  leader: boolean;
  maxFrameBytes: number;
  buffered: Uint8Array;
}

const data = workerData as ReaderData;
const decoder = new FrameDecoder(data.maxFrameBytes);
const port = parentPort!;

function feed(bytes: Uint8Array): void {
  try {
    decoder.receive(bytes);
    const batch: Message[] = [];
    for (let msg = decoder.next(); msg !== null; msg = decoder.next()) batch.push(msg);
    if (batch.length) port.postMessage(batch);
  } catch (exc) {
    const why = exc instanceof ProtocolError ? exc.message : String(exc);
    lifeline(data.killFd, data.leader, `the host sent a malformed message: ${why}`);
  }
}

if (data.buffered.length) feed(data.buffered);
const buf = Buffer.allocUnsafe(64 * 1024);
const PAUSE = new Int32Array(new SharedArrayBuffer(4));
for (;;) {
  let n: number;
  try {
    n = fs.readSync(data.fdIn, buf, 0, buf.length, null);
  } catch (exc) {
    const code = (exc as NodeJS.ErrnoException).code;
    if (code === "EINTR") continue;
    if (code === "EAGAIN") {
      // Only if someone made the pipe non-blocking: wait a little instead of spinning.
      Atomics.wait(PAUSE, 0, 0, 5);
      continue;
    }
    lifeline(data.killFd, data.leader, `reading the request pipe failed: ${exc}`);
  }
  if (n === 0) lifeline(data.killFd, data.leader, null); // the host is gone
  feed(Uint8Array.prototype.slice.call(buf, 0, n));
}
