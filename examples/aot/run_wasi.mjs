// Runs a wasm32-wasi program (e.g. run_model.c built for --target wasm32) under Node's WASI.
//   node --no-warnings examples/aot/run_wasi.mjs PROGRAM.wasm [ARG...]
// Every argument naming an existing file or folder is passed as its absolute path, and that folder
// (a file's parent) is preopened under the same path, so the program opens it as on the host.
// Needs Node 20+ (node:wasi, WASI preview1). Exits with the program's exit code.
import fs from 'node:fs';
import path from 'node:path';
import process from 'node:process';
import {WASI} from 'node:wasi';

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
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);
