# Install rules and the package files a consumer finds tpfabric with:
#   CMake:      find_package(tpfabric) -> tpfabric::tpfabric (shared), tpfabric::tpfabric_static
#   pkg-config: pkg-config --cflags --libs tpfabric   (add --static for the archive)
# Everything installed is relocatable: the files locate the prefix relative to themselves, so
# `cmake --install build --prefix DIR` and DESTDIR staging both work.
include(CMakePackageConfigHelpers)

set(TPF_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tpfabric)

# Runtime: the shared library and the CLI; Development: headers, archive, package files.
install(TARGETS tpfabric tpfabric_static
  EXPORT tpfabricTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Runtime NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
install(TARGETS tpf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tpf
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development
  FILES_MATCHING PATTERN "*.h")

# The static target's link interface names PkgConfig::HWLOC and PkgConfig::UCX (a private
# dependency still has to be linked into whoever links an archive); tpfabricConfig.cmake recreates
# those targets.
install(EXPORT tpfabricTargets
  NAMESPACE tpfabric::
  DESTINATION ${TPF_CMAKE_DIR} COMPONENT Development)

configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/tpfabricConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tpfabricConfig.cmake
  INSTALL_DESTINATION ${TPF_CMAKE_DIR})
# 0.x: a minor release may break the API, so only the same major.minor is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/tpfabricConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/tpfabricConfig.cmake
  ${PROJECT_BINARY_DIR}/tpfabricConfigVersion.cmake
  DESTINATION ${TPF_CMAKE_DIR} COMPONENT Development)

# pkg-config: prefix is computed from ${pcfiledir} so the file stays right after relocation
# (the prefix given to `cmake --install --prefix` is not known at configure time).
set(TPF_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  # Absolute install dirs cannot be relocated; use them as given.
  set(TPF_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(TPF_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(TPF_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  # e.g. lib/pkgconfig -> "../..", lib/x86_64-linux-gnu/pkgconfig -> "../../.."
  file(RELATIVE_PATH TPF_PC_UP "/prefix/${TPF_PC_DIR}" "/prefix")
  string(REGEX REPLACE "/$" "" TPF_PC_UP "${TPF_PC_UP}")
  set(TPF_PC_PREFIX "\${pcfiledir}/${TPF_PC_UP}")
  set(TPF_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(TPF_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/tpfabric.pc.in ${PROJECT_BINARY_DIR}/tpfabric.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tpfabric.pc
  DESTINATION ${TPF_PC_DIR} COMPONENT Development)
