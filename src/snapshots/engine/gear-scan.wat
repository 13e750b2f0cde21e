;; The FastCDC gear-hash scan of chunker.ts, in WebAssembly: 64-bit arithmetic is native here, where JavaScript has to
;; emulate the 48 bits the masks see with two 32-bit halves. Assembled by scripts/build-wasm.ts into gear-scan-wasm.ts.
;;
;; Memory: bytes 0..2047 hold the 256 gear values (u64, little endian), written by the caller once; the bytes to scan
;; are written by the caller at DATA_OFFSET (2048) onwards.
(module
  (memory (export "memory") 2)
  ;; The rolling hash, carried between calls when a range ends without a cut.
  (global $hash (export "hash") (mut i64) (i64.const 0))

  ;; Rolls the hash over the bytes at [from, to) and returns the address of the first byte after which
  ;; (hash & mask) == 0, or -1 when there is none. The hash is left in $hash either way.
  (func (export "scan") (param $i i32) (param $end i32) (param $mask i64) (result i32)
    (local $h i64)
    (local.set $h (global.get $hash))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        ;; h = (h << 1) + GEAR[byte], in 64 bits, as the fastcdc crate does.
        (local.set $h
          (i64.add
            (i64.shl (local.get $h) (i64.const 1))
            (i64.load (i32.shl (i32.load8_u (local.get $i)) (i32.const 3)))))
        (if (i64.eqz (i64.and (local.get $h) (local.get $mask)))
          (then
            (global.set $hash (local.get $h))
            (return (local.get $i))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (global.set $hash (local.get $h))
    (i32.const -1))
)
