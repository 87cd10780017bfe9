// Validates Kubernetes objects (a JSON array on stdin) against the Kubernetes OpenAPI schemas that the npm
// package kubernetes-models compiles into validators (prometheus-operator's for ServiceMonitor).
//   node validate_k8s.mjs MODULES_DIR < objects.json
// Exit 0: all valid. Exit 1: lists each invalid object with the schema errors. An object of a kind without a
// schema here is an error, never a silent pass.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node validate_k8s.mjs NODE_MODULES_DIR < objects.json");
  process.exit(2);
}

function modelFile(apiVersion, kind) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return join(modules, "@kubernetes-models/prometheus-operator", apiVersion, `${kind}.js`);
  }
  return join(modules, "kubernetes-models", apiVersion, `${kind}.js`); // "v1" is the core group's directory
}

const objects = JSON.parse(readFileSync(0, "utf8"));
let failures = 0;
for (const obj of objects) {
  const id = `${obj.kind}/${obj.metadata?.name ?? "?"} (${obj.apiVersion})`;
  let Model;
  try {
    const mod = await import(pathToFileURL(modelFile(obj.apiVersion, obj.kind)).href);
    Model = mod[obj.kind];
  } catch (e) {
    console.error(`${id}: no schema for this kind (${e.code ?? e.message})`);
    failures++;
    continue;
  }
  try {
    new Model(obj).validate();
    console.log(`valid   ${id}`);
  } catch (e) {
    console.error(`INVALID ${id}: ${e.message}`);
    failures++;
  }
}
process.exit(failures ? 1 : 0);
