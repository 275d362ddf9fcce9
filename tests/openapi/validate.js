// Validates an OpenAPI document with @apidevtools/swagger-parser (the
// document against the OpenAPI 3.x schema, every $ref resolvable) and exits
// non-zero naming every error. Usage: node validate.js api/openapi.yaml
'use strict';
const SwaggerParser = require('@apidevtools/swagger-parser');

async function main() {
  const file = process.argv[2];
  if (!file) {
    console.error('usage: node validate.js <openapi.yaml>');
    process.exit(2);
  }
  try {
    const api = await SwaggerParser.validate(file);
    const paths = Object.keys(api.paths || {});
    const operations = paths.reduce((n, p) => n + Object.keys(api.paths[p]).filter((k) => k !== 'parameters').length, 0);
    console.log(`${file}: valid OpenAPI ${api.openapi} (${paths.length} paths, ${operations} operations)`);
  } catch (err) {
    console.error(`${file}: INVALID`);
    console.error(err.message);
    for (const detail of err.details || []) console.error(JSON.stringify(detail));
    process.exit(1);
  }
}

main();
