//! SASL: the mechanisms we offer (MSSBCBS, PLAIN, ANONYMOUS) and the outcome; PLAIN checks the
//! key against the authorizer and grants its claim to the connection.

use fe2o3_amqp::frames::sasl;
use fe2o3_amqp_types::primitives::{Array, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslMechanisms, SaslOutcome};

use crate::frame::{self, FrameError, FrameReader, InFrame, ProtocolHeader};

use super::*;

impl Connection {
    /// The SASL exchange after the SASL protocol header: mechanisms, init, outcome; an error
    /// ends the connection (after the outcome, when authentication failed).
    pub(super) async fn sasl<R: tokio::io::AsyncRead + Unpin>(
        &mut self,
        reader: &mut FrameReader<R>,
    ) -> Result<(), FrameError> {
        self.out.extend_from_slice(&ProtocolHeader::Sasl.bytes());
        let mechanisms = SaslMechanisms {
            sasl_server_mechanisms: Array(vec![
                Symbol::from("MSSBCBS"),
                Symbol::from("PLAIN"),
                Symbol::from("ANONYMOUS"),
            ]),
        };
        frame::write_sasl(&mut self.out, &sasl::Frame::Mechanisms(mechanisms));
        self.flush();
        let init = match reader.read_frame().await? {
            InFrame::Sasl(sasl::Frame::Init(init)) if tracing::enabled!(tracing::Level::TRACE) => {
                tracing::trace!(mechanism = %init.mechanism.0, "sasl init");
                init
            }
            InFrame::Sasl(sasl::Frame::Init(init)) => init,
            other => {
                return Err(FrameError::Malformed(format!("expected sasl-init, got {other:?}")))
            }
        };
        let code = match init.mechanism.0.as_str() {
            "ANONYMOUS" | "MSSBCBS" | "EXTERNAL" => SaslCode::Ok,
            "PLAIN" => {
                let response = init.initial_response.map(|b| b.to_vec()).unwrap_or_default();
                let mut parts = response.split(|b| *b == 0).skip(1);
                let user = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                let pass = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                match self.cx.authorizer.verify_key(&user, &pass) {
                    Ok(claim) => {
                        self.grants.claims.push(claim);
                        SaslCode::Ok
                    }
                    Err(e) => {
                        tracing::info!(user = %user, error = %e, "sasl plain refused");
                        SaslCode::Auth
                    }
                }
            }
            _ => SaslCode::Auth,
        };
        let ok = code == SaslCode::Ok;
        frame::write_sasl(
            &mut self.out,
            &sasl::Frame::Outcome(SaslOutcome { code, additional_data: None }),
        );
        self.flush();
        if !ok {
            return Err(FrameError::Closed);
        }
        Ok(())
    }
}
