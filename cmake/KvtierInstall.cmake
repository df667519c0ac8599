# Install rules, the CMake package (find_package(kvtier)) and kvtier.pc.
include(CMakePackageConfigHelpers)

install(TARGETS kvtier EXPORT kvtierTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kvtier_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(KVTIER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${KVTIER_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
  ${PROJECT_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${KVTIER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvtierConfig.cmake ${PROJECT_BINARY_DIR}/kvtierConfigVersion.cmake
  DESTINATION ${KVTIER_CMAKE_DIR})

file(RELATIVE_PATH KVTIER_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier.pc.in ${PROJECT_BINARY_DIR}/kvtier.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kvtier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
