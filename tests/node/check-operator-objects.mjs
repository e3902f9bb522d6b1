// Checks prometheus-operator objects against the operator's CRD schemas, twice:
//   1. the compiled JSON-schema validators of @kubernetes-models/prometheus-operator (types,
//      required fields, enums, patterns such as the duration of `interval`);
//   2. the TypeScript types generated from the same schemas, under `tsc --strict`: an object
//      literal with a field the CRD does not define is an error there (the API server refuses
//      it under strict field validation, or drops it without a word).
// Usage: node check-operator-objects.mjs OBJECTS.json   (a JSON list of objects)
// Prints one problem per line; exit 0 when there is none, 1 otherwise, 2 on bad input.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const API = "monitoring.coreos.com/v1";
const KINDS = new Set(["ServiceMonitor", "PodMonitor", "PrometheusRule"]);
const here = path.dirname(fileURLToPath(import.meta.url));
const modelPath = (kind) => `@kubernetes-models/prometheus-operator/${API}/${kind}`;

const [file] = process.argv.slice(2);
if (!file) {
  console.error("usage: node check-operator-objects.mjs OBJECTS.json");
  process.exit(2);
}
const objects = JSON.parse(fs.readFileSync(file, "utf8"));
if (!Array.isArray(objects)) {
  console.error(`${file}: expected a JSON list of objects`);
  process.exit(2);
}

const problems = [];
const label = (obj, i) => `${obj.kind ?? "?"} ${obj.metadata?.name ?? `#${i}`}`;
const checked = [];
for (const [i, obj] of objects.entries()) {
  if (obj.apiVersion !== API || !KINDS.has(obj.kind)) {
    problems.push(`${label(obj, i)}: ${obj.apiVersion} ${obj.kind} is not a kind checked here`);
    continue;
  }
  checked.push([i, obj]);
  const model = (await import(modelPath(obj.kind)))[obj.kind];
  try {
    new model(obj).validate();
  } catch (err) {
    problems.push(`${label(obj, i)}: schema: ${err.message}`);
  }
}

// One module declaring each object under its kind's interface; its lines map back to objects.
const lines = [];
const owner = [];
for (const kind of new Set(checked.map(([, obj]) => obj.kind))) {
  lines.push(`import type { I${kind} } from "${modelPath(kind)}";`);
  owner.push(null);
}
for (const [i, obj] of checked) {
  const body = JSON.stringify(obj, null, 2).split("\n");
  body[0] = `export const object${i}: I${obj.kind} = ${body[0]}`;
  body[body.length - 1] += ";";
  for (const line of body) {
    lines.push(line);
    owner.push([i, obj]);
  }
}
const source = path.join(here, "objects.check.ts");
const text = lines.join("\n") + "\n";
const options = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  target: ts.ScriptTarget.ES2022,
  types: [],
};
const host = ts.createCompilerHost(options);
const isSource = (name) => path.resolve(name) === source;
const readFile = host.readFile.bind(host);
const getSourceFile = host.getSourceFile.bind(host);
host.readFile = (name) => (isSource(name) ? text : readFile(name));
host.fileExists = (name) => isSource(name) || ts.sys.fileExists(name);
host.getSourceFile = (name, version, ...rest) =>
  isSource(name) ? ts.createSourceFile(name, text, version, true) : getSourceFile(name, version, ...rest);
if (checked.length) {
  const program = ts.createProgram([source], options, host);
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, " ");
    if (!diagnostic.file || !isSource(diagnostic.file.fileName)) {
      problems.push(`types: ${message}`);
      continue;
    }
    const { line } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
    const at = owner[line];
    problems.push(`${at ? label(at[1], at[0]) : "imports"}: types: ${lines[line].trim()} ${message}`);
  }
}

for (const problem of problems) console.log(problem);
console.error(`${checked.length} object(s) checked, ${problems.length} problem(s)`);
process.exit(problems.length ? 1 : 0);
