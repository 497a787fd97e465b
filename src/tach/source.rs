//! Byte sources for the sample region: the mapped bytes themselves, or a zstd stream
//! decompressed window by window so that memory stays bounded whatever the file size.

use std::io::Read;
use std::sync::mpsc;

use super::error::FormatError;

/// A window of bytes that can be advanced and refilled.
pub trait ByteSource {
    /// The bytes currently available.
    fn window(&self) -> &[u8];
    /// Drops the first `consumed` bytes of the window and adds more. Returns `false`
    /// when the stream has ended (the window then holds all that is left).
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError>;
    /// True when the window already holds the whole rest of the stream.
    fn is_complete(&self) -> bool;
}

/// An uncompressed region: the window is the whole region, no copy.
pub struct SliceSource<'a> {
    data: &'a [u8],
}

impl<'a> SliceSource<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        SliceSource { data }
    }
}

impl ByteSource for SliceSource<'_> {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        self.data
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.data = &self.data[consumed..];
        Ok(false)
    }
    fn is_complete(&self) -> bool {
        true
    }
}

/// Size of the decompressed window. Records are at most a few KiB except REPEAT
/// records, which the decoder reads entry by entry, so this bounds memory.
const ZSTD_WINDOW: usize = 1 << 20;

/// Maps a zstd library error to our error.
fn zstd_error(e: std::io::Error) -> FormatError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FormatError::TruncatedZstd
    } else {
        let msg = e.to_string();
        if msg.contains("incomplete frame") || msg.contains("Read less bytes") {
            FormatError::TruncatedZstd
        } else {
            FormatError::Zstd(msg)
        }
    }
}

/// A zstd stream reader over `compressed`, set up as every reader of ours needs.
pub(crate) fn zstd_reader(
    compressed: &[u8],
) -> Result<zstd::stream::read::Decoder<'static, &[u8]>, FormatError> {
    // `with_buffer` reads straight from the slice; concatenated frames are read one
    // after the other, as CPython's reader accepts them.
    let mut decoder = zstd::stream::read::Decoder::with_buffer(compressed)
        .map_err(|e| FormatError::Zstd(e.to_string()))?;
    // CPython's writer uses a 2 MiB window; accept what zstd itself accepts by default
    // plus headroom for other writers, but never unbounded.
    decoder
        .window_log_max(31)
        .map_err(|e| FormatError::Zstd(e.to_string()))?;
    Ok(decoder)
}

/// Decompresses on the calling thread.
pub struct ZstdSource<'a> {
    decoder: zstd::stream::read::Decoder<'static, &'a [u8]>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    done: bool,
}

impl<'a> ZstdSource<'a> {
    pub fn new(compressed: &'a [u8]) -> Result<Self, FormatError> {
        let decoder = zstd_reader(compressed)?;
        // Small regions get a small window: no point zeroing a megabyte for a few KiB.
        let window = compressed.len().saturating_mul(8).clamp(4096, ZSTD_WINDOW);
        Ok(ZstdSource {
            decoder,
            buf: vec![0; window],
            start: 0,
            end: 0,
            done: compressed.is_empty(),
        })
    }
}

impl ByteSource for ZstdSource<'_> {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.start += consumed;
        if self.done {
            return Ok(false);
        }
        // Move what is left to the front, then fill the rest.
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        while self.end < self.buf.len() {
            let n = self
                .decoder
                .read(&mut self.buf[self.end..])
                .map_err(zstd_error)?;
            if n == 0 {
                self.done = true;
                return Ok(false);
            }
            self.end += n;
        }
        Ok(true)
    }
    fn is_complete(&self) -> bool {
        self.done
    }
}

/// Bytes of the threaded source's window that new data fills.
const THREADED_WINDOW: usize = 256 << 10;
/// Room kept free in front of each window for the previous window's unconsumed tail (a
/// record cut by the window's end: at most a few KiB; a longer tail is merged into a
/// new buffer instead).
const THREADED_RESERVE: usize = 64 << 10;

/// A filled buffer: decompressed bytes at `THREADED_RESERVE..end`.
type Filled = Result<(Vec<u8>, usize), FormatError>;

/// Decompresses on a helper thread and hands over full windows through a channel, so
/// decompression and record decoding run on two cores at once.
///
/// The helper decompresses straight into buffers that come back to it once decoded,
/// and each buffer keeps room in front for the tail of the window before it, so that
/// handing over a window copies only that tail: a handful of buffers is all the memory
/// ever touched (fresh pages cost about a millisecond a megabyte on these machines, as
/// much as decompressing it).
pub struct ThreadedZstdSource {
    rx: mpsc::Receiver<Filled>,
    recycle: mpsc::SyncSender<Vec<u8>>,
    current: Vec<u8>,
    start: usize,
    end: usize,
    done: bool,
    _worker: Option<std::thread::JoinHandle<()>>,
}

impl ThreadedZstdSource {
    /// `compressed` must be `'static` to cross threads: callers pass an `Arc`'d map.
    pub fn new<D>(data: D) -> Self
    where
        D: AsRef<[u8]> + Send + 'static,
    {
        // Two windows in flight: one being decoded, one being filled.
        let (tx, rx) = mpsc::sync_channel::<Filled>(2);
        let (recycle, recycled) = mpsc::sync_channel::<Vec<u8>>(4);
        let worker = std::thread::Builder::new()
            .name("tach-zstd".into())
            .spawn(move || {
                let compressed = data.as_ref();
                let mut decoder = match zstd_reader(compressed) {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                if compressed.is_empty() {
                    return;
                }
                loop {
                    let mut out = recycled
                        .try_recv()
                        .unwrap_or_else(|_| vec![0; THREADED_RESERVE + THREADED_WINDOW]);
                    let mut end = THREADED_RESERVE;
                    let mut more = true;
                    while end < out.len() {
                        match decoder.read(&mut out[end..]) {
                            Ok(0) => {
                                more = false;
                                break;
                            }
                            Ok(n) => end += n,
                            Err(e) => {
                                let _ = tx.send(Err(zstd_error(e)));
                                return;
                            }
                        }
                    }
                    if end > THREADED_RESERVE && tx.send(Ok((out, end))).is_err() {
                        return;
                    }
                    if !more {
                        return;
                    }
                }
            })
            .ok();
        ThreadedZstdSource {
            rx,
            recycle,
            current: Vec::new(),
            start: 0,
            end: 0,
            done: false,
            _worker: worker,
        }
    }
}

impl ByteSource for ThreadedZstdSource {
    #[inline(always)]
    fn window(&self) -> &[u8] {
        &self.current[self.start..self.end]
    }
    fn refill(&mut self, consumed: usize) -> Result<bool, FormatError> {
        self.start += consumed;
        if self.done {
            return Ok(false);
        }
        match self.rx.recv() {
            Ok(Ok((mut next, next_end))) => {
                let tail = self.end - self.start;
                let old = if tail <= THREADED_RESERVE {
                    // The unconsumed tail goes in the room kept in front of the new data.
                    let at = THREADED_RESERVE - tail;
                    next[at..THREADED_RESERVE].copy_from_slice(&self.current[self.start..self.end]);
                    self.start = at;
                    self.end = next_end;
                    std::mem::replace(&mut self.current, next)
                } else {
                    let fresh = &next[THREADED_RESERVE..next_end];
                    let mut merged = Vec::with_capacity(tail + fresh.len());
                    merged.extend_from_slice(&self.current[self.start..self.end]);
                    merged.extend_from_slice(fresh);
                    self.start = 0;
                    self.end = merged.len();
                    let _ = self.recycle.try_send(next);
                    std::mem::replace(&mut self.current, merged)
                };
                // Only buffers of the helper's size go back (not a merged one).
                if old.len() == THREADED_RESERVE + THREADED_WINDOW {
                    let _ = self.recycle.try_send(old);
                }
                Ok(true)
            }
            Ok(Err(e)) => {
                self.done = true;
                Err(e)
            }
            Err(mpsc::RecvError) => {
                self.done = true;
                Ok(false)
            }
        }
    }
    fn is_complete(&self) -> bool {
        self.done
    }
}
