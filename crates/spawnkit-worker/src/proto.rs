//! The Remote Workers API (`google.devtools.remoteworkers.v1test2`) messages a bot needs, and
//! a tonic client for its `Bots` service. No crate on crates.io ships them with the tonic and
//! prost versions of `bazel-remote-apis` (which has REAPI, ByteStream and google.rpc), so they
//! are written here by hand: the field numbers are those of bots.proto and worker.proto.
//! Also `google.rpc.PreconditionFailure`, which REAPI puts in a `FAILED_PRECONDITION` status to
//! name missing blobs.

use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use bazel_remote_apis::google::rpc::Status;
use prost::Message;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// A bot's session with the server: its leases, its worker description, its status.
#[derive(Clone, PartialEq, Message)]
pub struct BotSession {
    /// `{instance}/{uuid}`, chosen by the server.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Chosen by the bot; stable for the bot's life.
    #[prost(string, tag = "2")]
    pub bot_id: String,
    #[prost(enumeration = "BotStatus", tag = "3")]
    pub status: i32,
    #[prost(message, optional, tag = "4")]
    pub worker: Option<Worker>,
    #[prost(message, repeated, tag = "5")]
    pub leases: Vec<Lease>,
    #[prost(message, optional, tag = "6")]
    pub expire_time: Option<Timestamp>,
    /// BuildGrid's lease version: echoed back so it can tell a changed set of leases.
    #[prost(string, tag = "7")]
    pub version: String,
}

/// One unit of work assigned to the bot.
#[derive(Clone, PartialEq, Message)]
pub struct Lease {
    #[prost(string, tag = "7")]
    pub id: String,
    /// BuildGrid: the `Action` (or its `Digest`) packed in an `Any`.
    #[prost(message, optional, tag = "8")]
    pub payload: Option<Any>,
    /// The `ActionResult` packed in an `Any`, once completed.
    #[prost(message, optional, tag = "9")]
    pub result: Option<Any>,
    #[prost(enumeration = "LeaseState", tag = "2")]
    pub state: i32,
    #[prost(message, optional, tag = "3")]
    pub status: Option<Status>,
    #[prost(message, optional, tag = "5")]
    pub expire_time: Option<Timestamp>,
}

/// What the bot offers: devices with properties (the first is the one that runs commands),
/// and configs (BuildGrid reads `capacity` there).
#[derive(Clone, PartialEq, Message)]
pub struct Worker {
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
    #[prost(message, repeated, tag = "3")]
    pub configs: Vec<Property>,
}

/// A device of the worker (worker.proto `Device`).
#[derive(Clone, PartialEq, Message)]
pub struct Device {
    #[prost(string, tag = "1")]
    pub handle: String,
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
}

/// A key/value pair (`Worker.Property`, `Worker.Config`, `Device.Property`: same shape).
#[derive(Clone, PartialEq, Message)]
pub struct Property {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct CreateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub parent: String,
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
}

#[derive(Clone, PartialEq, Message)]
pub struct UpdateBotSessionRequest {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
    #[prost(message, optional, tag = "3")]
    pub update_mask: Option<FieldMask>,
}

/// `google.protobuf.FieldMask`.
#[derive(Clone, PartialEq, Message)]
pub struct FieldMask {
    #[prost(string, repeated, tag = "1")]
    pub paths: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BotStatus {
    Unspecified = 0,
    Ok = 1,
    Unhealthy = 2,
    HostRebooting = 3,
    BotTerminating = 4,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum LeaseState {
    Unspecified = 0,
    Pending = 1,
    Active = 2,
    Completed = 4,
    Cancelled = 5,
}

/// `google.rpc.PreconditionFailure`.
#[derive(Clone, PartialEq, Message)]
pub struct PreconditionFailure {
    #[prost(message, repeated, tag = "1")]
    pub violations: Vec<Violation>,
}

/// `google.rpc.PreconditionFailure.Violation`.
#[derive(Clone, PartialEq, Message)]
pub struct Violation {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub subject: String,
    #[prost(string, tag = "3")]
    pub description: String,
}

const TYPE_PREFIX: &str = "type.googleapis.com/";

/// Pack a message in an `Any` under its full protobuf name.
pub fn pack(full_name: &str, msg: &impl Message) -> Any {
    Any { type_url: format!("{TYPE_PREFIX}{full_name}"), value: msg.encode_to_vec() }
}

/// The full protobuf name an `Any` holds (`build.bazel.remote.execution.v2.Action`).
pub fn type_name(any: &Any) -> &str {
    any.type_url.rsplit('/').next().unwrap_or("")
}

/// A client of the `google.devtools.remoteworkers.v1test2.Bots` service.
#[derive(Clone)]
pub struct BotsClient {
    inner: tonic::client::Grpc<Channel>,
}

impl BotsClient {
    pub fn new(channel: Channel) -> BotsClient {
        BotsClient { inner: tonic::client::Grpc::new(channel) }
    }

    async fn unary<Req, Resp>(
        &mut self,
        req: tonic::Request<Req>,
        method: &'static str,
    ) -> Result<Resp, tonic::Status>
    where
        Req: Message + Send + Sync + 'static,
        Resp: Message + Default + Send + Sync + 'static,
    {
        self.inner
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("connection not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let path = PathAndQuery::from_static(method);
        Ok(self.inner.unary(req, path, codec).await?.into_inner())
    }

    pub async fn create_bot_session(
        &mut self,
        req: tonic::Request<CreateBotSessionRequest>,
    ) -> Result<BotSession, tonic::Status> {
        self.unary(req, "/google.devtools.remoteworkers.v1test2.Bots/CreateBotSession").await
    }

    pub async fn update_bot_session(
        &mut self,
        req: tonic::Request<UpdateBotSessionRequest>,
    ) -> Result<BotSession, tonic::Status> {
        self.unary(req, "/google.devtools.remoteworkers.v1test2.Bots/UpdateBotSession").await
    }
}
