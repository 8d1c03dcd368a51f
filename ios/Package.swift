// swift-tools-version:5.9
// tern for Swift: the `Tern` module over the C ABI (include/tern.h).
//
// * Apple platforms: `TernFFI.xcframework` holds libtern.a for each platform plus tern.h and its
//   module map; build it with `ios/build-xcframework.sh` on a Mac before opening this package.
// * Linux (how the package is built and tested here, scripts/swift-test.sh): TernFFI is a system
//   library target over include/tern.h linked against libtern.so —
//   `swift test -Xlinker -L<dir> -Xlinker -rpath -Xlinker <dir>` with <dir> holding libtern.so.
import PackageDescription

#if os(Linux)
let ffi: Target = .systemLibrary(name: "TernFFI", path: "Sources/TernFFI")
#else
let ffi: Target = .binaryTarget(name: "TernFFI", path: "TernFFI.xcframework")
#endif

let package = Package(
    name: "Tern",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [.library(name: "Tern", targets: ["Tern"])],
    targets: [
        ffi,
        .target(name: "Tern", dependencies: ["TernFFI"]),
        .testTarget(name: "TernTests", dependencies: ["Tern"]),
    ]
)
