mod grpc;
mod http;
mod keys;
mod metered;
mod redis;
mod support;
