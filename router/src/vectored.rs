//! Writes of many slices at once (I/O): a link connection's writer (frame heads and payloads) and a pump (DATA
//! already queued) hand the kernel, or a link's TLS, every slice of a batch in as few calls as it takes.

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// Writes every slice, in as few vectored writes as the writer takes.
pub async fn write_all<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut slices: &mut [std::io::IoSlice<'_>],
) -> std::io::Result<()> {
    while !slices.is_empty() {
        let n = w.write_vectored(slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}
