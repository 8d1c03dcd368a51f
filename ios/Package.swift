// swift-tools-version:5.9
// tern for Swift: the `Tern` module over the C ABI (include/tern.h). `TernFFI.xcframework` holds
// libtern.a for each Apple platform plus tern.h and its module map; build it with
// `ios/build-xcframework.sh` on a Mac before opening this package.
import PackageDescription

let package = Package(
    name: "Tern",
    platforms: [.iOS(.v15), .macOS(.v12)],
    products: [.library(name: "Tern", targets: ["Tern"])],
    targets: [
        .binaryTarget(name: "TernFFI", path: "TernFFI.xcframework"),
        .target(name: "Tern", dependencies: ["TernFFI"]),
        .testTarget(name: "TernTests", dependencies: ["Tern"]),
    ]
)
