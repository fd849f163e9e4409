mod grpc;
mod holds;
mod http;
mod keys;
mod metered;
mod redis;
mod support;
mod waits;
