// Validates Kubernetes objects (a JSON array on stdin) against the published OpenAPI schemas:
// kubernetes-models (core, apps, rbac) and @kubernetes-models/gateway-api (HTTPRoute). Prints
// one line per object, "ok KIND NAME" or "invalid KIND NAME: reason" / "unknown KIND ...", and
// exits 1 when any object is invalid. Objects of groups with no published model here
// (inference.networking.k8s.io) are reported "skipped" for the caller to check by hand.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

// The packages' own files (their "exports" map offers only `import` of bare subpaths, which a
// script outside the npm folder cannot name).
const root = process.env.EFIM_NPM + "/node_modules/";
const models = {
  "apps/v1": "kubernetes-models/apps/v1/index.js",
  "v1": "kubernetes-models/v1/index.js",
  "rbac.authorization.k8s.io/v1": "kubernetes-models/rbac.authorization.k8s.io/v1/index.js",
  "gateway.networking.k8s.io/v1":
    "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/index.js",
};

const docs = JSON.parse(readFileSync(0, "utf8"));
let bad = 0;
for (const doc of docs) {
  const what = `${doc.kind} ${doc.metadata?.name}`;
  const path = models[doc.apiVersion];
  if (!path) {
    console.log(`skipped ${what} (${doc.apiVersion}: no published schema here)`);
    continue;
  }
  const mod = await import(pathToFileURL(root + path).href);
  const Model = mod[doc.kind];
  if (!Model) {
    console.log(`unknown ${what} (${doc.apiVersion} has no kind ${doc.kind})`);
    bad++;
    continue;
  }
  try {
    new Model(doc).validate();
    console.log(`ok ${what}`);
  } catch (e) {
    console.log(`invalid ${what}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
