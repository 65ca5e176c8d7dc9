// Preloaded into the MCP Inspector CLI by tests/test_http_inspector.py (node --import): the
// Inspector's 0.15 line, the last that runs on Node 20, has no option to send a header, so
// every request its fetch makes gets `Authorization: Bearer $REGDEV_TEST_BEARER` here.
const bearer = process.env.REGDEV_TEST_BEARER;
const original = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : {}));
  if (bearer) headers.set("Authorization", `Bearer ${bearer}`);
  return original(input, { ...init, headers });
};
