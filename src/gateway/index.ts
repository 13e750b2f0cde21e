export { createGateway, openApiDocument, type GatewayOptions } from './app';
export { CODEC_BASE_PATH, type CodecServerOptions } from './codec-server';
export { ApiKeys, ensureDevKey, generateKey, hashKey, type Principal, type Role } from './keys';
export { GATEWAY_CODES, STATUS_OF, problemOf, type Problem } from './problems';
export { GatewayTlsError, startGateway, type GatewayTls, type RunningGateway } from './server';
