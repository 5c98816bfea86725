// Runs a wasm32-wasi program (e.g. run_model.c built for --target wasm32) under Node's WASI.
//   node --no-warnings examples/aot/run_wasi.mjs PROGRAM.wasm [ARG...]
// Every argument naming an existing file or folder is passed as its absolute path, and that folder
// (a file's parent) is preopened under the same path, so the program opens it as on the host.
// Needs Node 18 (Debian 12's nodejs) or later: node:wasi, WASI preview1. Exits with the program's
// exit code.
import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import v8 from 'node:v8';
import {WASI} from 'node:wasi';

// Node 20.20's V8 crashed here now and then (SIGSEGV, or a fatal error in the GC) when
// incremental marking finished inside a memory.grow that the program's malloc made: 8 of 12
// resnet18 runs, against 0 of 12 without incremental marking. Set before any wasm runs.
v8.setFlagsFromString('--no-incremental-marking');

const [program, ...rest] = process.argv.slice(2);
if (!program) {
  console.error('usage: node run_wasi.mjs PROGRAM.wasm [ARG...]');
  process.exit(2);
}
const preopens = {};
const args = [path.basename(program)];
for (const arg of rest) {
  if (!arg.startsWith('-') && fs.existsSync(arg)) {
    const abs = path.resolve(arg);
    const dir = fs.statSync(abs).isDirectory() ? abs : path.dirname(abs);
    preopens[dir] = dir;
    args.push(abs);
  } else {
    args.push(arg);
  }
}
const wasi = new WASI({version: 'preview1', args, env: {}, preopens, returnOnExit: true});
const module = await WebAssembly.compile(fs.readFileSync(program));
// wasi.getImportObject() would say the same, but Node 18 does not have it.
const instance =
    await WebAssembly.instantiate(module, {wasi_snapshot_preview1: wasi.wasiImport});
process.exitCode = wasi.start(instance);
